package dev.handlerkit.jmxagent;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.zip.GZIPOutputStream;
import org.junit.Test;

/** The config in an environment variable, in the encoding of jvm.EncodeConfigEnv (pkg/jvm/configenv.go). */
public class EnvConfigTest {

    private static final int MAX = 4 << 20;

    private static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static String encode(byte[] config) throws IOException {
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        try (GZIPOutputStream gz = new GZIPOutputStream(buf)) {
            gz.write(config);
        }
        return EnvConfig.GZIP_PREFIX + Base64.getEncoder().encodeToString(buf.toByteArray());
    }

    @Test
    public void decodesWhatGoEncodes() {
        // jvm.EncodeConfigEnv([]byte("rules:\n- pattern: \".*\"\n")), gzip.BestCompression, written by Go.
        String fromGo = "gzip+base64:H4sIAAAAAAAC/yoqzUkttuLSVShILClJLcqzUlDS01LiAgQAAP//MHmliRcAAAA=";
        assertArrayEquals(utf8("rules:\n- pattern: \".*\"\n"), EnvConfig.decode("V", fromGo, MAX));
    }

    @Test
    public void plainValueIsTheConfigItself() {
        assertArrayEquals(utf8("rules:\n- pattern: x\n"), EnvConfig.decode("V", "rules:\n- pattern: x\n", MAX));
        assertArrayEquals(new byte[0], EnvConfig.decode("V", "", MAX));
        assertArrayEquals(utf8("lowercaseOutputName: true # é"), EnvConfig.decode("V", "lowercaseOutputName: true # é", MAX));
    }

    @Test
    public void roundTripsWithWhiteSpaceAndLineBreaks() throws IOException {
        byte[] config = utf8("startDelaySeconds: 0\nrules:\n- pattern: 'java.lang<type=(.+)><>(\\w+)'\n");
        String v = encode(config);
        assertArrayEquals(config, EnvConfig.decode("V", v, MAX));
        String wrapped = EnvConfig.GZIP_PREFIX + "  " + v.substring(EnvConfig.GZIP_PREFIX.length(), 20) + "\r\n"
                + v.substring(20) + "\n";
        assertArrayEquals(config, EnvConfig.decode("V", wrapped, MAX));
    }

    @Test
    public void garbledValuesAreConfigErrorsNamingTheVariable() throws IOException {
        String good = encode(utf8("rules: []\n"));
        String[] cases = {
            EnvConfig.GZIP_PREFIX + "!!!not base64!!!",
            EnvConfig.GZIP_PREFIX,
            EnvConfig.GZIP_PREFIX + Base64.getEncoder().encodeToString(utf8("plain text, not gzip")),
            // cut short: the gzip trailer (and part of the data) missing
            good.substring(0, good.length() - 12),
        };
        for (String c : cases) {
            try {
                EnvConfig.decode("HANDLERKIT_JMX_CONFIG", c, MAX);
                fail("decoded " + c);
            } catch (ConfigException e) {
                assertTrue(e.getMessage(), e.getMessage().contains("HANDLERKIT_JMX_CONFIG"));
            }
        }
    }

    @Test
    public void aGzipBombStopsAtTheLimit() throws IOException {
        byte[] big = new byte[(MAX) + 1024];
        java.util.Arrays.fill(big, (byte) 'a');
        String v = encode(big);
        assertTrue("the bomb is small: " + v.length(), v.length() < 16 << 10);
        try {
            EnvConfig.decode("V", v, MAX);
            fail("a config over the limit decoded");
        } catch (ConfigException e) {
            assertTrue(e.getMessage(), e.getMessage().contains("more than " + MAX));
        }
        StringBuilder plain = new StringBuilder();
        for (int i = 0; i < 100; i++) {
            plain.append('x');
        }
        try {
            EnvConfig.decode("V", plain.toString(), 99);
            fail("a plain config over the limit decoded");
        } catch (ConfigException e) {
            assertTrue(e.getMessage(), e.getMessage().contains("more than 99"));
        }
    }
}
