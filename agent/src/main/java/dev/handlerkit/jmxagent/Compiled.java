package dev.handlerkit.jmxagent;

import io.prometheus.jmx.JmxCollector;
import java.nio.file.Path;
import java.util.Map;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import org.yaml.snakeyaml.constructor.SafeConstructor;

/**
 * Compiled is a config parsed and compiled by the collector, with the agent's own reading of the keys the
 * collector leaves to jmx_exporter's agent: {@code httpServer}, {@code excludeJvmMetrics}. {@link ConfigLoader}
 * reads the bytes it is compiled from.
 */
final class Compiled {

    /**
     * Largest size of the config outside httpServer, as a tree expanded through its YAML aliases: nodes plus the
     * characters of strings (16 Mi, four times the largest file; a config without aliases is about its own size).
     */
    static final long MAX_EXPANDED_SIZE = 16L << 20;

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
     * Parses and compiles bytes, whose SHA-256 is sha; the collector reads the same bytes from snapshot, a private
     * copy ({@link ConfigLoader#compile}).
     *
     * @throws Failure when the config is invalid, with the collector's or the parser's message
     */
    static Compiled compile(Path snapshot, byte[] bytes, String sha) {
        Object doc;
        try {
            LoaderOptions opts = new LoaderOptions();
            opts.setAllowDuplicateKeys(false);
            opts.setMaxAliasesForCollections(50);
            doc = new Yaml(new SafeConstructor(opts)).load(decode(bytes));
        } catch (Failure f) {
            throw f;
        } catch (Throwable t) {
            throw new Failure(sha, "invalid YAML: " + Agent.describe(t), t);
        }
        if (doc != null && !(doc instanceof Map)) {
            throw new Failure(sha, "the config must be a YAML map, not " + doc.getClass().getSimpleName(), null);
        }
        Map<?, ?> root = (Map<?, ?>) doc;
        checkExpandedSize(root, sha);
        JmxCollector collector;
        try {
            collector = new JmxCollector(snapshot.toFile(), JmxCollector.Mode.AGENT);
        } catch (LinkageError | VirtualMachineError e) {
            throw e; // Not the config's fault: reported as internal.
        } catch (Throwable t) {
            throw new Failure(sha, Agent.describe(t), t);
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
            throw new Failure(sha, Agent.describe(t), t);
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
            throw new Failure(Agent.sha256(bytes), "the config is not valid " + cs.name() + ": " + e, e);
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
