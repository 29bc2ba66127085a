package dev.handlerkit.jmxagent;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.Deque;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TemporaryFolder;

/** A reload reads the config file once: the bytes whose digest says "changed" are the bytes compiled. */
public class ReloadTest {

    @Rule
    public TemporaryFolder tmp = new TemporaryFolder();

    private static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** Reader hands out the given contents in turn, as a file replaced between reads would; it counts its reads. */
    static final class Replaced implements ConfigLoader.Reader {
        final Deque<byte[]> contents;
        int reads;

        Replaced(byte[]... contents) {
            this.contents = new ArrayDeque<byte[]>(Arrays.asList(contents));
        }

        @Override
        public byte[] read(Path config) throws IOException {
            reads++;
            return contents.size() > 1 ? contents.poll() : contents.peek();
        }
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    @Test
    public void aReloadReadsTheFileOnceAndCompilesWhatItRead() throws Exception {
        byte[] a = utf8("rules:\n- pattern: a\n");
        byte[] b = utf8("rules:\n- pattern: b\n");
        byte[] c = utf8("rules:\n- pattern: c\n");
        Path dir = tmp.newFolder().toPath();
        Path config = dir.resolve("config.yaml");
        Files.write(config, a);
        // The start reads a; the file is then replaced by b, and by c right after the reloader's read.
        Replaced reader = new Replaced(a, b, c);
        ConfigLoader loader = new ConfigLoader(reader);
        Compiled started = loader.load(config);
        assertEquals(Agent.sha256(a), started.sha256);
        AgentArgs args = AgentArgs.parse("127.0.0.1:" + freePort() + ":" + config);
        Server s = Server.start(args, dir, started, Agent.properties(), loader);
        Status st = new Status();
        st.state = Status.SERVING;
        st.configSHA256 = started.sha256;
        s.status = st;

        s.reloadIfChanged();

        assertEquals("reads of the config file: one for the start, one for the reload", 2, reader.reads);
        Status after = s.status;
        assertTrue("a reload was recorded", after.reload != null && after.reload.ok);
        assertEquals("the reload compiled the bytes it compared", Agent.sha256(b), after.reload.configSHA256);
        assertEquals("the config in force is the one read", Agent.sha256(b), after.configSHA256);

        // The next look reads c, a change, and applies it: nothing was skipped.
        s.reloadIfChanged();
        assertEquals(3, reader.reads);
        assertEquals(Agent.sha256(c), s.status.configSHA256);
    }
}
