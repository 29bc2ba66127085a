package dev.handlerkit.jmxagent;

import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * AgentArgs is the agent argument in jmx_exporter's own format: {@code [host:]<port>:<config file>}, where host is
 * a name, an IPv4 address or an IPv6 address in brackets.
 */
final class AgentArgs {

    private static final Pattern FORMAT = Pattern.compile("^(?:([\\w.-]+|\\[.+]):)?(\\d{1,5}):(.+)$");

    /** Host as given, without brackets; empty when the argument names none (all addresses). */
    final String host;

    /** TCP port, 1 to 65535. */
    final int port;

    /** Path of the YAML config file. */
    final String configFile;

    /** Invalid is a well-formed argument with a bad value; it still names the config file. */
    static final class Invalid extends IllegalArgumentException {
        private static final long serialVersionUID = 1L;

        /** The config file the argument names. */
        final String configFile;

        Invalid(String message, String configFile) {
            super(message);
            this.configFile = configFile;
        }
    }

    private AgentArgs(String host, int port, String configFile) {
        this.host = host;
        this.port = port;
        this.configFile = configFile;
    }

    /**
     * Parses an agent argument.
     *
     * @param arg the argument the JVM passed to agentmain or premain
     * @return the parsed argument
     * @throws IllegalArgumentException with jmx_exporter's wording when the argument is malformed; an
     *     {@link Invalid} when only a value is wrong, so that the refusal can still be written next to the config
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
        int port = Integer.parseInt(m.group(2));
        if (port < 1 || port > 65535) {
            throw new Invalid("Port must be between 1 and 65535 [" + port + "]", m.group(3));
        }
        return new AgentArgs(host, port, m.group(3));
    }
}
