package dev.handlerkit.jmxagent;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

/**
 * ConfigLoader reads a config, from a file or from an environment variable, and compiles it ({@link Compiled}):
 * the one path of the agent's start and of each reload ({@link Server}). A config is read once per start or
 * reload: the bytes whose SHA-256 says whether the file changed are the bytes compiled.
 *
 * <p>The collector compiles a private snapshot of the bytes read (removed right after), not the file itself: so
 * the SHA-256 names exactly the bytes compiled, and the collector's own reload, which re-reads its file whenever
 * the file's modification time changes, never applies a config the agent has not checked (the snapshot is gone,
 * and a missing file never looks newer).
 */
final class ConfigLoader {

    /** Largest config read (4 MiB). */
    static final int MAX_CONFIG_BYTES = 4 << 20;

    /** Reader reads a config file's bytes. */
    interface Reader {
        /**
         * Returns the bytes of config.
         *
         * @throws ConfigException when the file is refused unopened (not a regular file, too large)
         * @throws IOException when it cannot be read
         */
        byte[] read(Path config) throws IOException;
    }

    /**
     * FILES reads a config file as the agent does: a regular file of at most MAX_CONFIG_BYTES, refused unopened
     * otherwise ({@link BoundedFile}), so that a FIFO or a device named as the config never blocks the start or
     * the reloader.
     */
    static final Reader FILES = new Reader() {
        @Override
        public byte[] read(Path config) throws IOException {
            return BoundedFile.read(config, MAX_CONFIG_BYTES, "config file");
        }
    };

    /** Bytes is a config as read: its bytes and their SHA-256. */
    static final class Bytes {
        final byte[] data;
        final String sha256;

        Bytes(byte[] data) {
            this.data = data;
            this.sha256 = Agent.sha256(data);
        }
    }

    private final Reader reader;

    /** Returns a loader that reads config files with FILES. */
    ConfigLoader() {
        this(FILES);
    }

    /** Returns a loader that reads config files with reader. */
    ConfigLoader(Reader reader) {
        this.reader = reader;
    }

    /**
     * Reads config once.
     *
     * @throws ConfigException when the file is refused unopened (not a regular file, too large)
     * @throws IOException when it cannot be read
     */
    Bytes read(Path config) throws IOException {
        return new Bytes(reader.read(config));
    }

    /**
     * Reads, parses and compiles the config file, for the agent's start.
     *
     * @throws Compiled.Failure when the file cannot be read or the config is invalid, with the reader's, the
     *     collector's or the parser's message
     */
    Compiled load(Path config) throws IOException {
        // jmx_exporter does the same first: the platform MBean server from the agent's own class loader
        // context avoids class loader surprises in the collector later.
        ManagementFactory.getPlatformMBeanServer();
        Bytes bytes;
        try {
            bytes = read(config);
        } catch (IOException e) {
            throw new Compiled.Failure("", "cannot read config file: " + e, e);
        } catch (ConfigException e) {
            throw new Compiled.Failure("", e.getMessage(), e);
        }
        return compile(config, bytes);
    }

    /**
     * Reads the config from environment variable name ({@link EnvConfig}), then parses and compiles it as
     * {@link #load} does. There is no file to reload: the environment of a running process does not change, so a
     * new config takes effect at the JVM's next start.
     *
     * @throws Compiled.Failure when the variable is unset, does not decode, or holds an invalid config
     */
    Compiled fromEnv(String name) throws IOException {
        ManagementFactory.getPlatformMBeanServer();
        String value;
        try {
            value = System.getenv(name);
        } catch (SecurityException e) {
            throw new Compiled.Failure("", "cannot read environment variable " + name + ": " + Agent.describe(e), e);
        }
        if (value == null) {
            throw new Compiled.Failure("", "environment variable " + name + " is not set", null);
        }
        byte[] data;
        try {
            data = EnvConfig.decode(name, value, MAX_CONFIG_BYTES);
        } catch (ConfigException e) {
            throw new Compiled.Failure("", e.getMessage(), e);
        }
        return compile(null, new Bytes(data));
    }

    /**
     * Parses and compiles bytes read from config (null for a config from the environment) through a private
     * snapshot, which is removed before it returns.
     *
     * @throws Compiled.Failure when the config is invalid
     * @throws IOException when there is no writable directory for the snapshot
     */
    Compiled compile(Path config, Bytes bytes) throws IOException {
        Path snapshot = snapshot(config, bytes.data);
        try {
            return Compiled.compile(snapshot, bytes.data, bytes.sha256);
        } finally {
            try {
                Files.deleteIfExists(snapshot);
            } catch (IOException e) {
                // Left behind in a temporary directory.
            }
        }
    }

    /**
     * Writes bytes to a new private file next to config (when there is one), else in the temporary directory,
     * else in /dev/shm: a container with a read-only root file system and no volume on /tmp still has the
     * memory file system the runtime mounts there.
     */
    private static Path snapshot(Path config, byte[] bytes) throws IOException {
        Path p = null;
        if (config != null && config.getParent() != null) {
            try {
                p = Files.createTempFile(config.getParent(), ".agent-config-", ".yaml");
            } catch (IOException | RuntimeException e) {
                // Try the temporary directory.
            }
        }
        if (p == null) {
            try {
                p = Files.createTempFile("handlerkit-jmx-agent-config-", ".yaml");
            } catch (IOException | RuntimeException e) {
                try {
                    p = Files.createTempFile(Paths.get("/dev/shm"), "handlerkit-jmx-agent-config-", ".yaml");
                } catch (IOException | RuntimeException e2) {
                    throw new IOException("no writable directory for the collector's private copy of the"
                            + " config (java.io.tmpdir: " + Agent.describe(e) + "; /dev/shm: " + Agent.describe(e2) + ")",
                            e);
                }
            }
        }
        try {
            Files.write(p, bytes);
        } catch (IOException e) {
            Files.deleteIfExists(p);
            throw e;
        }
        return p;
    }
}
