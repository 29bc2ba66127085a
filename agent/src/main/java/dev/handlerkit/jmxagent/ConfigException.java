package dev.handlerkit.jmxagent;

/** ConfigException is an invalid config or argument; its message is reported as is (reason config-invalid). */
class ConfigException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    ConfigException(String message) {
        super(message);
    }

    ConfigException(String message, Throwable cause) {
        super(message, cause);
    }
}
