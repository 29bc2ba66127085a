package dev.handlerkit.jmxagent;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import org.junit.Test;

/** Files named by the config: regular files of a bounded size only, never opened otherwise. */
public class BoundedFileTest {

    private static void refused(Path p, int limit, String want) throws IOException {
        try {
            BoundedFile.read(p, limit, "keyStore");
            fail("read " + p);
        } catch (ConfigException e) {
            assertTrue(e.getMessage(), e.getMessage().contains(want));
        }
    }

    @Test
    public void readsARegularFile() throws IOException {
        Path f = Files.createTempFile("bounded", ".p12");
        try {
            Files.write(f, new byte[] {1, 2, 3});
            assertArrayEquals(new byte[] {1, 2, 3}, BoundedFile.read(f, 3, "keyStore"));
            refused(f, 2, "is 3 bytes, more than the 2 allowed");
            // A Secret or ConfigMap volume's file is a chain of symbolic links to a regular file: read.
            Path link = f.resolveSibling(f.getFileName() + ".link");
            Path link2 = f.resolveSibling(f.getFileName() + ".link2");
            Files.createSymbolicLink(link, f);
            Files.createSymbolicLink(link2, link);
            try {
                assertArrayEquals(new byte[] {1, 2, 3}, BoundedFile.read(link2, 3, "keyStore"));
            } finally {
                Files.delete(link2);
                Files.delete(link);
            }
        } finally {
            Files.delete(f);
        }
    }

    @Test
    public void refusesWhatIsNotARegularFile() throws Exception {
        Path dir = Files.createTempDirectory("bounded");
        try {
            refused(dir, 100, "is not a regular file: a directory");
            refused(Paths.get("/dev/zero"), 100, "keyStore [/dev/zero] is not a regular file: a character device");
            Path fifo = dir.resolve("fifo");
            Process p = new ProcessBuilder("mkfifo", fifo.toString()).inheritIO().start();
            if (p.waitFor() == 0) {
                // Opened, this would block until a writer came: the test would never end.
                refused(fifo, 100, "is not a regular file: a FIFO");
                Path link = dir.resolve("link");
                Files.createSymbolicLink(link, fifo);
                refused(link, 100, "is not a regular file: a FIFO");
                Files.delete(link);
                Files.delete(fifo);
            }
        } finally {
            Files.delete(dir);
        }
    }
}
