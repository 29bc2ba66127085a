package dev.handlerkit.jmxagent;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.zip.GZIPInputStream;

/**
 * EnvConfig reads a config from an environment variable's value, in the encoding the Go side writes
 * ({@code jvm.EncodeConfigEnv}, pkg/jvm/configenv.go) and jmx-attach {@code --config-env} reads: the value itself
 * is plain YAML, unless it starts with {@code gzip+base64:}, followed by the standard base64 (with padding) of the
 * gzipped YAML.
 */
final class EnvConfig {

    /** Starts a value that holds the config gzipped and base64-encoded (jvm.ConfigEnvGzipPrefix). */
    static final String GZIP_PREFIX = "gzip+base64:";

    private EnvConfig() {}

    /**
     * Returns the config bytes that value holds.
     *
     * <p>Decompression stops after max bytes, so that a small value that would expand without bound (a gzip bomb)
     * costs nothing.
     *
     * @param name the variable's name, for messages
     * @param value the variable's value
     * @param max the largest config accepted, in bytes
     * @throws ConfigException when the value does not decode, or holds more than max bytes
     */
    static byte[] decode(String name, String value, int max) {
        if (!value.startsWith(GZIP_PREFIX)) {
            byte[] b = value.getBytes(StandardCharsets.UTF_8);
            if (b.length > max) {
                throw new ConfigException("the config in environment variable " + name + " is " + b.length
                        + " bytes, more than " + max);
            }
            return b;
        }
        // Like Go's decoder (jvm.DecodeConfigEnv): surrounding white space and line breaks are ignored.
        String enc = value.substring(GZIP_PREFIX.length()).trim().replace("\r", "").replace("\n", "");
        byte[] gz;
        try {
            gz = Base64.getDecoder().decode(enc);
        } catch (IllegalArgumentException e) {
            throw new ConfigException("environment variable " + name + " is not valid " + GZIP_PREFIX + " (base64: "
                    + Agent.describe(e) + ")");
        }
        try (InputStream in = new GZIPInputStream(new ByteArrayInputStream(gz))) {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            byte[] buf = new byte[8192];
            int n;
            while ((n = in.read(buf)) > 0) {
                out.write(buf, 0, n);
                if (out.size() > max) {
                    throw new ConfigException("the config in environment variable " + name
                            + " decompresses to more than " + max + " bytes");
                }
            }
            return out.toByteArray();
        } catch (IOException e) {
            throw new ConfigException("environment variable " + name + " is not valid " + GZIP_PREFIX + " (gzip: "
                    + Agent.describe(e) + ")");
        }
    }
}
