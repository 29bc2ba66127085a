package dev.handlerkit.jmxagent;

import io.prometheus.metrics.config.PrometheusProperties;
import io.prometheus.metrics.config.PrometheusPropertiesLoader;
import java.io.File;
import java.lang.instrument.Instrumentation;
import java.net.BindException;
import java.net.UnknownHostException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HashMap;

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
            ConfigLoader loader = new ConfigLoader();
            Compiled c;
            try {
                c = config != null ? loader.load(config) : loader.fromEnv(args.configEnv);
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
                s = Server.start(args, dir, c, properties(), loader);
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
}
