package dev.handlerkit.jmxagent;

import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * AgentArgs is the agent argument in jmx_exporter's own format, {@code [host:]<port>:<config file>}, where host is
 * a name, an IPv4 address or an IPv6 address in brackets; or, in place of the config file, {@code env:<NAME>}:
 * the config is the value of environment variable NAME (plain YAML, or {@code gzip+base64:} and the base64 of
 * the gzipped YAML, see {@link EnvConfig}). The start-time injection of the operator uses the second form, so that
 * the config travels in the pod's spec with no file to mount (docs/atstart.md).
 */
final class AgentArgs {

    private static final Pattern FORMAT = Pattern.compile("^(?:([\\w.-]+|\\[.+]):)?(\\d{1,5}):(.+)$");

    /** Starts a config argument that names an environment variable rather than a file. */
    static final String ENV_PREFIX = "env:";

    /** A portable environment variable name (POSIX: letters, digits and underscores, not starting with a digit). */
    private static final Pattern ENV_NAME = Pattern.compile("^[A-Za-z_][A-Za-z0-9_]{0,254}$");

    /** Host as given, without brackets; empty when the argument names none (all addresses). */
    final String host;

    /** TCP port, 1 to 65535. */
    final int port;

    /** Path of the YAML config file; null when the config comes from an environment variable. */
    final String configFile;

    /** Name of the environment variable holding the config ({@code env:<NAME>}); null for a config file. */
    final String configEnv;

    /**
     * Invalid is a well-formed argument with a bad value; it still names the config file (null for the
     * {@code env:} form, which has no directory to write a status into).
     */
    static final class Invalid extends IllegalArgumentException {
        private static final long serialVersionUID = 1L;

        /** The config file the argument names, or null. */
        final String configFile;

        Invalid(String message, String configFile) {
            super(message);
            this.configFile = configFile;
        }
    }

    private AgentArgs(String host, int port, String configFile, String configEnv) {
        this.host = host;
        this.port = port;
        this.configFile = configFile;
        this.configEnv = configEnv;
    }

    /**
     * Parses an agent argument.
     *
     * @param arg the argument the JVM passed to agentmain or premain
     * @return the parsed argument
     * @throws IllegalArgumentException with jmx_exporter's wording when the argument is malformed, or when the
     *     {@code env:} form names no valid variable; an {@link Invalid} when only a value is wrong, so that the
     *     refusal can still be written next to the config
     */
    static AgentArgs parse(String arg) {
        if (arg == null || arg.trim().isEmpty()) {
            throw new IllegalArgumentException("Malformed arguments [" + arg + "]: want [host:]<port>:<config file>");
        }
        Matcher m = FORMAT.matcher(arg.trim());
        if (!m.matches()) {
            throw new IllegalArgumentException("Malformed arguments [" + arg + "]: want [host:]<port>:<config file>");
        }
        String host = m.group(1) == null ? "" : m.group(1);
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        String config = m.group(3);
        String env = null;
        if (config.startsWith(ENV_PREFIX)) {
            env = config.substring(ENV_PREFIX.length());
            config = null;
            if (!ENV_NAME.matcher(env).matches()) {
                throw new IllegalArgumentException("Malformed arguments [" + arg + "]: env: must name an environment"
                        + " variable (letters, digits and underscores, not starting with a digit)");
            }
        }
        int port = Integer.parseInt(m.group(2));
        if (port < 1 || port > 65535) {
            throw new Invalid("Port must be between 1 and 65535 [" + port + "]", config);
        }
        return new AgentArgs(host, port, config, env);
    }
}
