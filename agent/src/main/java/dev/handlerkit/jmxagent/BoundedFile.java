package dev.handlerkit.jmxagent;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;

/**
 * BoundedFile reads a file the config (or the agent argument) names without trusting it: it must be a regular
 * file, at most a given size, and it is looked at before it is opened, so that a FIFO nobody writes, a device
 * ({@code /dev/zero}, a terminal), {@code /proc/self/fd/N} or a directory is refused with what it is rather than
 * blocking the thread that reads it (premain, before the application's main, or the JVM's attach listener).
 *
 * <p>The checks: the path's own attributes without following a link, then, for a link, the attributes of what it
 * points to; anything but a regular file is refused unopened. The file is then read at most {@code limit + 1}
 * bytes, so a file that grows, or is swapped for a device, between the check and the read is still bounded. What
 * is left: a path swapped for a FIFO in the microseconds between the check and the open, by someone who may write
 * its directory, blocks the open until a writer comes (Java cannot open a file without blocking).
 */
final class BoundedFile {

    private BoundedFile() {}

    /**
     * Reads file, refusing it unopened when it is not a regular file or is larger than limit bytes.
     *
     * @param file the file to read
     * @param limit the largest size accepted, in bytes
     * @param what what the file is, for the message (for example {@code keyStore})
     * @return the file's bytes
     * @throws ConfigException when the file is not a regular file or is larger than limit
     * @throws IOException when the file cannot be read
     */
    static byte[] read(Path file, int limit, String what) throws IOException {
        BasicFileAttributes a = Files.readAttributes(file, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
        if (a.isSymbolicLink()) {
            a = Files.readAttributes(file, BasicFileAttributes.class);
        }
        if (!a.isRegularFile()) {
            throw new ConfigException(what + " [" + file + "] is not a regular file: " + kind(file, a)
                    + "; it is not opened");
        }
        if (a.size() > limit) {
            throw new ConfigException(tooLarge(file, what, a.size(), limit));
        }
        try (InputStream in = Files.newInputStream(file)) {
            byte[] buf = new byte[8192];
            ByteArrayOutputStream out = new ByteArrayOutputStream((int) Math.min(a.size(), limit));
            int n;
            while ((n = in.read(buf, 0, (int) Math.min(buf.length, limit + 1L - out.size()))) > 0) {
                out.write(buf, 0, n);
                if (out.size() > limit) {
                    throw new ConfigException(what + " [" + file + "] grew while it was read, to more than the "
                            + limit + " bytes allowed");
                }
            }
            return out.toByteArray();
        }
    }

    static String tooLarge(Path file, String what, long size, int limit) {
        return what + " [" + file + "] is " + size + " bytes, more than the " + limit + " allowed";
    }

    /** Describes what a file that is not a regular file is, from its mode where the platform tells it. */
    private static String kind(Path file, BasicFileAttributes a) {
        if (a.isDirectory()) {
            return "a directory";
        }
        try {
            int mode = (Integer) Files.getAttribute(file, "unix:mode");
            switch (mode & 0170000) {
                case 0010000:
                    return "a FIFO";
                case 0020000:
                    return "a character device";
                case 0060000:
                    return "a block device";
                case 0140000:
                    return "a socket";
                default:
                    break;
            }
        } catch (IOException | RuntimeException e) {
            // No unix view: the generic description below.
        }
        return "a FIFO, device or socket";
    }
}
