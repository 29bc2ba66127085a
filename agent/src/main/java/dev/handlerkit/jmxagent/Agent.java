package dev.handlerkit.jmxagent;

import io.prometheus.jmx.BuildInfoMetrics;
import io.prometheus.jmx.JmxCollector;
import io.prometheus.metrics.config.PrometheusProperties;
import io.prometheus.metrics.config.PrometheusPropertiesLoader;
import io.prometheus.metrics.instrumentation.jvm.JvmMetrics;
import io.prometheus.metrics.model.registry.PrometheusRegistry;
import java.io.File;
import java.io.IOException;
import java.lang.instrument.Instrumentation;
import java.lang.management.ManagementFactory;
import java.net.BindException;
import java.net.UnknownHostException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HashMap;
import java.util.Map;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import org.yaml.snakeyaml.constructor.SafeConstructor;

/**
 * Agent is handlerkit's JMX exporter java agent: jmx_exporter's collector (1.6.0) and the Prometheus client's
 * exposition behind jmx_exporter 1.x's {@code httpServer} settings, in a start that cannot end the JVM.
 *
 * <p>{@link #agentmain} and {@link #premain} take jmx_exporter's argument, {@code [host:]<port>:<config file>},
 * or {@code [host:]<port>:env:<NAME>} to read the config from an environment variable (the start-time injection,
 * docs/atstart.md). They parse and compile the whole config with the collector's own code, look for a jmx_exporter
 * agent already in the JVM, bind the port, and only then serve. Whatever happens, they return normally, print
 * exactly one line on {@code System.err} starting {@code handlerkit-jmx-agent: }, and write
 * {@code agent-status.json} next to the config file when there is one (docs/agent.md). They never call
 * {@code System.exit}.
 */
public final class Agent {

    /** Agent version. */
    static final String VERSION = "0.2.0";

    /** The jmx_exporter collector whose semantics the agent follows. */
    static final String COLLECTOR_VERSION = "1.6.0";

    /** The agent's name in the status file. */
    static final String AGENT_NAME = "handlerkit-jmx-agent " + VERSION + " (jmx_exporter collector "
            + COLLECTOR_VERSION + ")";

    /** Prefix of the one line each start prints on System.err. */
    static final String LINE_PREFIX = "handlerkit-jmx-agent: ";

    /** System property set while the agent serves in this JVM, for loads through another class loader. */
    static final String SERVING_PROPERTY = "dev.handlerkit.jmxagent.serving";

    /** Largest config file read (4 MiB). */
    static final int MAX_CONFIG_BYTES = 4 << 20;

    /**
     * Largest size of the config outside httpServer, as a tree expanded through its YAML aliases: nodes plus the
     * characters of strings (16 Mi, four times the largest file; a config without aliases is about its own size).
     */
    static final long MAX_EXPANDED_SIZE = 16L << 20;

    static final String CONFIG_INVALID = "config-invalid";
    static final String AGENT_ALREADY_PRESENT = "agent-already-present";
    static final String PORT_IN_USE = "port-in-use";
    static final String PORT_NOT_PERMITTED = "port-not-permitted";
    static final String INTERNAL = "internal";
    static final String JVM_UNSUPPORTED = "jvm-unsupported";
    static final String JDK_TOOL = "jdk-tool";

    private static final Object LOCK = new Object();

    /** The server started by this class, if any; guarded by LOCK. */
    private static Server serving;

    private Agent() {}

    /**
     * Starts the agent in a running JVM (dynamic attach). It never throws and never ends the JVM.
     *
     * @param arg {@code [host:]<port>:<config file>}
     * @param inst the JVM's instrumentation
     */
    public static void agentmain(String arg, Instrumentation inst) {
        run(arg, inst, false);
    }

    /**
     * Starts the agent before the application's main ({@code -javaagent:}, also from {@code JAVA_TOOL_OPTIONS}).
     * It never throws and never ends the JVM. A JDK tool (jcmd, jshell, jps, ...) started in a container whose
     * {@code JAVA_TOOL_OPTIONS} name the agent gets no agent ({@code jdk-tool}): it would take or contest the
     * application's port.
     *
     * @param arg {@code [host:]<port>:<config file>} or {@code [host:]<port>:env:<NAME>}
     * @param inst the JVM's instrumentation
     */
    public static void premain(String arg, Instrumentation inst) {
        run(arg, inst, true);
    }

    private static void run(String arg, Instrumentation inst, boolean atStart) {
        String line;
        try {
            line = start(arg, inst, atStart);
        } catch (Throwable t) {
            line = Status.REFUSED + ": " + INTERNAL + ": " + describe(t);
        }
        try {
            System.err.println(LINE_PREFIX + oneLine(line));
            System.err.flush();
        } catch (Throwable t) {
            // Nowhere left to report.
        }
    }

    private static String start(String arg, Instrumentation inst, boolean atStart) {
        Status st = new Status();
        if (atStart) {
            String tool = jdkTool(property("sun.java.command"));
            if (tool != null) {
                // Before anything else: nothing is read, bound or written, not even a status file.
                return refuse(st, null, JDK_TOOL, tool + " is a JDK tool, not the application; the agent stays out"
                        + " of it");
            }
        }
        AgentArgs args;
        try {
            args = AgentArgs.parse(arg);
        } catch (AgentArgs.Invalid e) {
            Path dir = null;
            try {
                if (e.configFile != null) {
                    dir = Paths.get(e.configFile).toAbsolutePath().getParent();
                }
            } catch (RuntimeException ignored) {
                // No directory to write the status into: the stderr line reports the refusal.
            }
            return refuse(st, dir, CONFIG_INVALID, e.getMessage());
        } catch (IllegalArgumentException e) {
            return refuse(st, null, CONFIG_INVALID, e.getMessage());
        }
        st.host = args.host;
        st.port = args.port;
        Path config = null;
        Path dir = null;
        if (args.configEnv == null) {
            try {
                config = Paths.get(args.configFile).toAbsolutePath();
                dir = config.getParent();
            } catch (RuntimeException e) {
                return refuse(st, null, CONFIG_INVALID, "invalid config file path [" + args.configFile + "]: "
                        + describe(e));
            }
        }
        try {
            return start(args, config, dir, st, inst);
        } catch (Throwable t) {
            return refuse(st, dir, INTERNAL, describe(t));
        }
    }

    /** Starts from a parsed argument; config and dir are null for a config from an environment variable. */
    private static String start(AgentArgs args, Path config, Path dir, Status st, Instrumentation inst) {
        String missing = missingModules();
        if (missing != null) {
            return refuse(st, dir, JVM_UNSUPPORTED, missing);
        }
        synchronized (LOCK) {
            String already = System.getProperty(SERVING_PROPERTY);
            if (serving != null || already != null) {
                String where = serving != null ? serving.describe() : already;
                // Never overwrite the status of the agent that serves from this very directory.
                Path statusDir = serving != null && dir != null && dir.equals(serving.dir) ? null : dir;
                return refuse(st, statusDir, AGENT_ALREADY_PRESENT,
                        "handlerkit-jmx-agent is already serving in this JVM (" + where + ")");
            }
            String other = Detector.find(inst, ownJar());
            if (other != null) {
                return refuse(st, dir, AGENT_ALREADY_PRESENT, other);
            }
            Compiled c;
            try {
                c = config != null ? Compiled.load(config) : Compiled.fromEnv(args.configEnv);
            } catch (ConfigException e) {
                return refuse(st, dir, CONFIG_INVALID, e.getMessage(), e);
            } catch (LinkageError | VirtualMachineError e) {
                return refuse(st, dir, INTERNAL, e.toString(), e);
            } catch (Throwable t) {
                return refuse(st, dir, CONFIG_INVALID, describe(t), t);
            }
            st.configSHA256 = c.sha256;
            Server s;
            try {
                s = Server.start(args, dir, c, properties());
            } catch (BindException e) {
                String m = String.valueOf(e.getMessage());
                String reason = m.toLowerCase(java.util.Locale.ROOT).contains("permission")
                        ? PORT_NOT_PERMITTED
                        : PORT_IN_USE;
                return refuse(st, dir, reason, "cannot bind " + bindAddress(args) + ": " + m);
            } catch (UnknownHostException e) {
                return refuse(st, dir, CONFIG_INVALID, "unknown host [" + args.host + "]: " + e.getMessage());
            } catch (ConfigException e) {
                return refuse(st, dir, CONFIG_INVALID, e.getMessage());
            } catch (Throwable t) {
                return refuse(st, dir, INTERNAL, describe(t));
            }
            serving = s;
            try {
                System.setProperty(SERVING_PROPERTY, s.describe());
            } catch (Throwable t) {
                // A security manager may refuse; the static guard still holds for this class loader.
            }
            st.state = Status.SERVING;
            s.status = st;
            s.writeStatus();
            s.startReloader();
            return "serving on " + bindAddress(args) + " (config sha256 " + c.sha256.substring(0, 12) + ")";
        }
    }

    /**
     * Returns what this JVM lacks to run the agent, or null. A runtime trimmed with jlink may leave out the
     * modules the agent serves with: jdk.httpserver (the HTTP server) and java.management (the MBeans).
     */
    static String missingModules() {
        StringBuilder b = new StringBuilder();
        String[][] needed = {
            {"com.sun.net.httpserver.HttpServer", "jdk.httpserver"},
            {"java.lang.management.ManagementFactory", "java.management"},
        };
        for (String[] n : needed) {
            try {
                Class.forName(n[0], false, Agent.class.getClassLoader());
            } catch (ClassNotFoundException | LinkageError e) {
                b.append(b.length() == 0 ? "" : ", ").append(n[1]).append(" (").append(n[0]).append(')');
            }
        }
        if (b.length() == 0) {
            return null;
        }
        return "this JVM lacks " + b + ", which the agent needs; a runtime built with jlink must include the"
                + " module";
    }

    /**
     * Returns the main class of a JDK tool named by a {@code sun.java.command} value, or null when it names
     * something else. The JDK's tools run from its own modules ({@code jdk.jcmd/sun.tools.jcmd.JCmd},
     * {@code jdk.jshell/jdk.internal.jshell.tool.JShellToolProvider}, {@code java.base/sun.security.tools.keytool.Main})
     * or, on Java 8, from the packages listed here.
     */
    static String jdkTool(String command) {
        if (command == null) {
            return null;
        }
        String main = command.trim();
        int sp = main.indexOf(' ');
        if (sp >= 0) {
            main = main.substring(0, sp);
        }
        String module = "";
        int slash = main.indexOf('/');
        if (slash >= 0) {
            module = main.substring(0, slash);
            main = main.substring(slash + 1);
        }
        if (main.isEmpty()) {
            return null;
        }
        if (module.startsWith("jdk.")) {
            return main;
        }
        String[] packages = {"sun.tools.", "com.sun.tools.", "sun.security.tools.", "sun.jvm.hotspot.",
            "jdk.internal.jshell.", "jdk.jshell.", "jdk.jfr.internal.tool.", "jdk.tools."};
        for (String p : packages) {
            if (main.startsWith(p)) {
                return main;
            }
        }
        return null;
    }

    private static String property(String name) {
        try {
            return System.getProperty(name);
        } catch (Throwable t) {
            return null;
        }
    }

    private static String bindAddress(AgentArgs args) {
        String h = args.host.contains(":") ? "[" + args.host + "]" : args.host;
        return h + ":" + args.port;
    }

    private static String refuse(Status st, Path dir, String reason, String message) {
        return refuse(st, dir, reason, message, null);
    }

    private static String refuse(Status st, Path dir, String reason, String message, Throwable cause) {
        st.state = Status.REFUSED;
        st.reason = reason;
        st.message = message == null ? "" : message;
        if (dir != null) {
            if (st.configSHA256.isEmpty() && cause instanceof Compiled.Failure) {
                st.configSHA256 = ((Compiled.Failure) cause).sha256;
            }
            try {
                st.write(dir);
            } catch (Throwable t) {
                // The stderr line still reports the refusal.
            }
        }
        return Status.REFUSED + ": " + reason + ": " + st.message;
    }

    /** Returns the client library's settings: its defaults, never the application's files or properties. */
    static PrometheusProperties properties() {
        return PrometheusPropertiesLoader.load(new HashMap<Object, Object>());
    }

    private static File ownJar() {
        try {
            return new File(Agent.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        } catch (Throwable t) {
            return null;
        }
    }

    /** Returns the message of t, or its class name when it has none. */
    static String describe(Throwable t) {
        String m = t.getMessage();
        if (m == null || m.trim().isEmpty()) {
            return t.getClass().getName();
        }
        return m;
    }

    private static String oneLine(String s) {
        String flat = s.replace("\r\n", " ").replace('\n', ' ').replace('\r', ' ');
        return flat.length() > 2000 ? flat.substring(0, 2000) + "..." : flat;
    }

    /** Returns the lower-case hex SHA-256 of data. */
    static String sha256(byte[] data) {
        try {
            return hex(MessageDigest.getInstance("SHA-256").digest(data));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Returns the lower-case hex of d. */
    static String hex(byte[] d) {
        StringBuilder b = new StringBuilder(d.length * 2);
        for (byte x : d) {
            b.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
        }
        return b.toString();
    }

    /**
     * Reads the config file: a regular file of at most MAX_CONFIG_BYTES, refused unopened otherwise
     * ({@link BoundedFile}), so that a FIFO or a device named as the config never blocks the start or the reloader.
     */
    static byte[] read(Path config) throws IOException {
        return BoundedFile.read(config, MAX_CONFIG_BYTES, "config file");
    }

    /**
     * Compiled is a config parsed and compiled by the collector, with the agent's own reading of the keys the
     * collector leaves to jmx_exporter's agent: {@code httpServer}, {@code excludeJvmMetrics}.
     */
    static final class Compiled {
        final String sha256;
        final JmxCollector collector;
        final HttpServerConfig http;
        final boolean excludeJvmMetrics;

        private Compiled(String sha256, JmxCollector collector, HttpServerConfig http, boolean excludeJvmMetrics) {
            this.sha256 = sha256;
            this.collector = collector;
            this.http = http;
            this.excludeJvmMetrics = excludeJvmMetrics;
        }

        /** Failure is a config that does not compile, with the SHA-256 of the bytes tried. */
        static final class Failure extends ConfigException {
            private static final long serialVersionUID = 1L;
            final String sha256;

            Failure(String sha256, String message, Throwable cause) {
                super(message, cause);
                this.sha256 = sha256;
            }
        }

        /**
         * Reads the config from environment variable name ({@link EnvConfig}), then parses and compiles it as
         * {@link #load} does. There is no file to reload: the environment of a running process does not change,
         * so a new config takes effect at the JVM's next start.
         *
         * @throws Failure when the variable is unset, does not decode, or holds an invalid config
         */
        static Compiled fromEnv(String name) throws IOException {
            ManagementFactory.getPlatformMBeanServer();
            String value;
            try {
                value = System.getenv(name);
            } catch (SecurityException e) {
                throw new Failure("", "cannot read environment variable " + name + ": " + describe(e), e);
            }
            if (value == null) {
                throw new Failure("", "environment variable " + name + " is not set", null);
            }
            byte[] bytes;
            try {
                bytes = EnvConfig.decode(name, value, MAX_CONFIG_BYTES);
            } catch (ConfigException e) {
                throw new Failure("", e.getMessage(), e);
            }
            String sha = sha256(bytes);
            Path snapshot = snapshot(null, bytes);
            try {
                return compile(snapshot, bytes, sha);
            } finally {
                try {
                    Files.deleteIfExists(snapshot);
                } catch (IOException e) {
                    // Left behind in a temporary directory.
                }
            }
        }

        /**
         * Reads, parses and compiles the config file.
         *
         * <p>The collector compiles a private snapshot of the bytes read (removed right after), not the file
         * itself: so sha256 names exactly the bytes compiled, and the collector's own reload, which re-reads its
         * file whenever the file's modification time changes, never applies a config the agent has not checked
         * (the snapshot is gone, and a missing file never looks newer).
         *
         * @throws Failure when the config is invalid, with the collector's or the parser's message
         */
        static Compiled load(Path config) throws IOException {
            // jmx_exporter does the same first: the platform MBean server from the agent's own class loader
            // context avoids class loader surprises in the collector later.
            ManagementFactory.getPlatformMBeanServer();
            byte[] bytes;
            try {
                bytes = read(config);
            } catch (IOException e) {
                throw new Failure("", "cannot read config file: " + e, e);
            } catch (ConfigException e) {
                throw new Failure("", e.getMessage(), e);
            }
            String sha = sha256(bytes);
            Path snapshot = snapshot(config, bytes);
            try {
                return compile(snapshot, bytes, sha);
            } finally {
                try {
                    Files.deleteIfExists(snapshot);
                } catch (IOException e) {
                    // Left behind in a temporary directory.
                }
            }
        }

        /**
         * Writes bytes to a new private file next to config (when there is one), else in the temporary directory,
         * else in /dev/shm: a container with a read-only root file system and no volume on /tmp still has the
         * memory file system the runtime mounts there.
         */
        private static Path snapshot(Path config, byte[] bytes) throws IOException {
            Path p = null;
            if (config != null && config.getParent() != null) {
                try {
                    p = Files.createTempFile(config.getParent(), ".agent-config-", ".yaml");
                } catch (IOException | RuntimeException e) {
                    // Try the temporary directory.
                }
            }
            if (p == null) {
                try {
                    p = Files.createTempFile("handlerkit-jmx-agent-config-", ".yaml");
                } catch (IOException | RuntimeException e) {
                    try {
                        p = Files.createTempFile(Paths.get("/dev/shm"), "handlerkit-jmx-agent-config-", ".yaml");
                    } catch (IOException | RuntimeException e2) {
                        throw new IOException("no writable directory for the collector's private copy of the"
                                + " config (java.io.tmpdir: " + describe(e) + "; /dev/shm: " + describe(e2) + ")",
                                e);
                    }
                }
            }
            try {
                Files.write(p, bytes);
            } catch (IOException e) {
                Files.deleteIfExists(p);
                throw e;
            }
            return p;
        }

        private static Compiled compile(Path config, byte[] bytes, String sha) {
            Object doc;
            try {
                LoaderOptions opts = new LoaderOptions();
                opts.setAllowDuplicateKeys(false);
                opts.setMaxAliasesForCollections(50);
                doc = new Yaml(new SafeConstructor(opts)).load(decode(bytes));
            } catch (Failure f) {
                throw f;
            } catch (Throwable t) {
                throw new Failure(sha, "invalid YAML: " + describe(t), t);
            }
            if (doc != null && !(doc instanceof Map)) {
                throw new Failure(sha, "the config must be a YAML map, not " + doc.getClass().getSimpleName(), null);
            }
            Map<?, ?> root = (Map<?, ?>) doc;
            checkExpandedSize(root, sha);
            JmxCollector collector;
            try {
                collector = new JmxCollector(config.toFile(), JmxCollector.Mode.AGENT);
            } catch (LinkageError | VirtualMachineError e) {
                throw e; // Not the config's fault: reported as internal.
            } catch (Throwable t) {
                throw new Failure(sha, describe(t), t);
            }
            if (root != null && root.containsKey("openTelemetry")) {
                throw new Failure(sha, "/openTelemetry is not supported by handlerkit-jmx-agent (it serves /metrics"
                        + " for Prometheus to scrape); remove the section", null);
            }
            boolean exclude = false;
            if (root != null && root.containsKey("excludeJvmMetrics")) {
                Object v = root.get("excludeJvmMetrics");
                if (v instanceof Boolean) {
                    exclude = (Boolean) v;
                } else {
                    String s = String.valueOf(v).trim().toLowerCase(java.util.Locale.ROOT);
                    if (s.equals("true") || s.equals("yes") || s.equals("on") || s.equals("1")) {
                        exclude = true;
                    } else if (!(s.equals("false") || s.equals("no") || s.equals("off") || s.equals("0"))) {
                        throw new Failure(sha, "/excludeJvmMetrics must be a boolean", null);
                    }
                }
            }
            HttpServerConfig http;
            try {
                http = HttpServerConfig.parse(root);
            } catch (ConfigException e) {
                throw new Failure(sha, e.getMessage(), e);
            } catch (LinkageError | VirtualMachineError e) {
                throw e;
            } catch (Throwable t) {
                throw new Failure(sha, describe(t), t);
            }
            if (http.subjectAttributeName != null) {
                throw new Failure(sha, "/httpServer/authentication/plugin/subjectAttributeName is not supported by"
                        + " handlerkit-jmx-agent", null);
            }
            return new Compiled(sha, collector, http, exclude);
        }

        /**
         * Refuses a config whose sections other than httpServer, expanded through their YAML aliases, are larger
         * than MAX_EXPANDED_SIZE: the collector reads them (its own parse of the same text) and walks what it reads
         * as a tree, so that a few aliases under rules would have it build 10^8 rules, for hours, in premain or in
         * a reload. The httpServer section is the agent's alone, read by key and compared by digest
         * ({@link YamlGraph}), so it is not counted.
         */
        private static void checkExpandedSize(Map<?, ?> root, String sha) {
            if (root == null) {
                return;
            }
            long n = 1;
            try {
                for (Map.Entry<?, ?> e : root.entrySet()) {
                    if ("httpServer".equals(e.getKey())) {
                        continue;
                    }
                    n += YamlGraph.expandedSize(e.getKey(), MAX_EXPANDED_SIZE)
                            + YamlGraph.expandedSize(e.getValue(), MAX_EXPANDED_SIZE);
                    if (n > MAX_EXPANDED_SIZE) {
                        throw new Failure(sha, "the config expands to more than " + MAX_EXPANDED_SIZE + " nodes and"
                                + " characters through its YAML aliases; the collector would walk every one", null);
                    }
                }
            } catch (Failure f) {
                throw f;
            } catch (ConfigException e) {
                throw new Failure(sha, e.getMessage(), e);
            }
        }

        /**
         * Decodes a YAML document strictly: UTF-16 with a byte order mark, else UTF-8 (a byte order mark
         * allowed). Bytes that are not valid in the encoding are an error, where a lenient decoder would turn them
         * into replacement characters inside patterns and names.
         */
        private static String decode(byte[] bytes) {
            java.nio.charset.Charset cs = java.nio.charset.StandardCharsets.UTF_8;
            int skip = 0;
            if (bytes.length >= 2 && (bytes[0] & 0xff) == 0xfe && (bytes[1] & 0xff) == 0xff) {
                cs = java.nio.charset.StandardCharsets.UTF_16BE;
                skip = 2;
            } else if (bytes.length >= 2 && (bytes[0] & 0xff) == 0xff && (bytes[1] & 0xff) == 0xfe) {
                cs = java.nio.charset.StandardCharsets.UTF_16LE;
                skip = 2;
            } else if (bytes.length >= 3 && (bytes[0] & 0xff) == 0xef && (bytes[1] & 0xff) == 0xbb
                    && (bytes[2] & 0xff) == 0xbf) {
                skip = 3;
            }
            try {
                return cs.newDecoder()
                        .onMalformedInput(java.nio.charset.CodingErrorAction.REPORT)
                        .onUnmappableCharacter(java.nio.charset.CodingErrorAction.REPORT)
                        .decode(java.nio.ByteBuffer.wrap(bytes, skip, bytes.length - skip))
                        .toString();
            } catch (java.nio.charset.CharacterCodingException e) {
                throw new Failure(sha256(bytes), "the config is not valid " + cs.name() + ": " + e, e);
            }
        }

        /** Reports whether a reload from this config to next needs a restart of the JVM to take full effect. */
        String restartRequired(Compiled next) {
            StringBuilder b = new StringBuilder();
            if (!http.sectionDigest.equals(next.http.sectionDigest)) {
                b.append("the httpServer section changed; it takes effect at the JVM's next start");
            }
            if (excludeJvmMetrics != next.excludeJvmMetrics) {
                if (b.length() > 0) {
                    b.append("; ");
                }
                b.append("excludeJvmMetrics changed; it takes effect at the JVM's next start");
            }
            return b.toString();
        }
    }

    /** Registers the JVM metrics jmx_exporter's agent registers, unless the config excludes them. */
    static void registerJvmMetrics(Compiled c, PrometheusRegistry registry, PrometheusProperties props) {
        new BuildInfoMetrics().register(registry);
        if (!c.excludeJvmMetrics) {
            JvmMetrics.builder(props).register(registry);
        }
    }
}
