package dev.handlerkit.jmxagent;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;

/**
 * Status is what the agent reports in {@code agent-status.json} next to its config file: the contract with
 * jmx-attach (docs/agent.md).
 */
final class Status {

    /** File name of the status file, in the config file's directory. */
    static final String FILE_NAME = "agent-status.json";

    /** Largest status file written; longer messages are cut to fit. */
    static final int MAX_BYTES = 16 * 1024;

    /** The agent is serving /metrics. */
    static final String SERVING = "serving";

    /** The agent refused to start; the JVM is untouched apart from the agent's classes. */
    static final String REFUSED = "refused";

    String state = REFUSED;
    String reason = "";
    String message = "";
    String configSHA256 = "";
    String host = "";
    int port;
    String restartRequired = "";
    /** Null until the first reload attempt. */
    Reload reload;

    /** Reload is the outcome of the last reload attempt. */
    static final class Reload {
        String configSHA256 = "";
        boolean ok;
        String message = "";
    }

    /** Returns a copy that reload can change while the old one may still be written. */
    Status copy() {
        Status s = new Status();
        s.state = state;
        s.reason = reason;
        s.message = message;
        s.configSHA256 = configSHA256;
        s.host = host;
        s.port = port;
        s.restartRequired = restartRequired;
        if (reload != null) {
            s.reload = new Reload();
            s.reload.configSHA256 = reload.configSHA256;
            s.reload.ok = reload.ok;
            s.reload.message = reload.message;
        }
        return s;
    }

    /** Returns the JSON document, at most MAX_BYTES long in UTF-8. */
    String toJSON() {
        int limit = 8000;
        while (true) {
            String json = render(limit);
            if (json.getBytes(StandardCharsets.UTF_8).length <= MAX_BYTES || limit < 64) {
                return json;
            }
            limit /= 2;
        }
    }

    private String render(int limit) {
        StringBuilder b = new StringBuilder(512);
        b.append("{\"version\":1");
        field(b, "agent", Agent.AGENT_NAME, limit);
        field(b, "state", state, limit);
        field(b, "reason", reason, limit);
        field(b, "message", message, limit);
        field(b, "configSHA256", configSHA256, limit);
        field(b, "host", host, limit);
        b.append(",\"port\":").append(port);
        field(b, "restartRequired", restartRequired, limit);
        if (reload != null) {
            b.append(",\"reload\":{");
            b.append("\"configSHA256\":");
            string(b, reload.configSHA256, limit);
            b.append(",\"ok\":").append(reload.ok);
            field(b, "message", reload.message, limit);
            b.append('}');
        }
        return b.append("}\n").toString();
    }

    private static void field(StringBuilder b, String name, String value, int limit) {
        b.append(",\"").append(name).append("\":");
        string(b, value, limit);
    }

    private static void string(StringBuilder b, String s, int limit) {
        if (s == null) {
            s = "";
        }
        if (s.length() > limit) {
            s = s.substring(0, limit) + "...";
        }
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"':
                    b.append("\\\"");
                    break;
                case '\\':
                    b.append("\\\\");
                    break;
                case '\n':
                    b.append("\\n");
                    break;
                case '\r':
                    b.append("\\r");
                    break;
                case '\t':
                    b.append("\\t");
                    break;
                default:
                    if (c < 0x20 || (c >= 0xd800 && c <= 0xdfff && !validSurrogate(s, i))) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        b.append('"');
    }

    /** Reports whether the surrogate at i is half of a well-formed pair (a lone one is escaped). */
    private static boolean validSurrogate(String s, int i) {
        char c = s.charAt(i);
        if (Character.isHighSurrogate(c)) {
            return i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1));
        }
        return i > 0 && Character.isHighSurrogate(s.charAt(i - 1));
    }

    /**
     * Writes the status atomically into dir: a temporary file in the same directory, mode 0644, renamed over
     * {@link #FILE_NAME}.
     *
     * @param dir the config file's directory
     * @throws IOException when the directory is not writable
     */
    void write(Path dir) throws IOException {
        byte[] data = toJSON().getBytes(StandardCharsets.UTF_8);
        Path tmp = Files.createTempFile(dir, ".agent-status-", ".tmp");
        try {
            try {
                Files.setPosixFilePermissions(tmp, PosixFilePermissions.fromString("rw-r--r--"));
            } catch (UnsupportedOperationException e) {
                // Not a POSIX file system: the platform's default mode.
            }
            try (OutputStream out = Files.newOutputStream(tmp)) {
                out.write(data);
            }
            Path target = dir.resolve(FILE_NAME);
            try {
                Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING);
            }
        } finally {
            Files.deleteIfExists(tmp);
        }
    }
}
