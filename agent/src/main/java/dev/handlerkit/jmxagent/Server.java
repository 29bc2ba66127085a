package dev.handlerkit.jmxagent;

import com.sun.net.httpserver.Authenticator;
import com.sun.net.httpserver.HttpContext;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import com.sun.net.httpserver.HttpsConfigurator;
import com.sun.net.httpserver.HttpsServer;
import io.prometheus.jmx.BuildInfoMetrics;
import io.prometheus.jmx.JmxCollector;
import io.prometheus.metrics.config.PrometheusProperties;
import io.prometheus.metrics.exporter.httpserver.DefaultHandler;
import io.prometheus.metrics.exporter.httpserver.HealthyHandler;
import io.prometheus.metrics.exporter.httpserver.MetricsHandler;
import io.prometheus.metrics.instrumentation.jvm.JvmMetrics;
import io.prometheus.metrics.model.registry.MultiCollector;
import io.prometheus.metrics.model.registry.PrometheusRegistry;
import io.prometheus.metrics.model.registry.PrometheusScrapeRequest;
import io.prometheus.metrics.model.snapshots.MetricSnapshots;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.util.concurrent.RejectedExecutionHandler;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Predicate;

/**
 * Server is a serving agent: the HTTP(S) server, its registry, the collector in force, and the thread that
 * reloads the config. Every thread it starts is a daemon, so that it never keeps the JVM alive.
 */
final class Server {

    /** How often the reloader looks at the config file. */
    static final long RELOAD_INTERVAL_MILLIS = 1000;

    final AgentArgs args;
    /** The config file's directory, where the status is written; null for a config from the environment. */
    final Path dir;
    /** The config file the reloader watches; null for a config from the environment, which never changes. */
    final Path config;
    private final HttpServer http;
    private final SwappableCollector collector;

    /** Reads and compiles the config file on each reload. */
    private final ConfigLoader loader;

    /** The config in force. Guarded by this. */
    private Compiled current;

    /** The config the agent started with: httpServer changes are judged against it. */
    private final Compiled started;

    /** The status last written; guarded by this. */
    Status status;

    /** SHA-256 of the config bytes last tried by a start or a reload, or the refusal of a file not read. */
    private String lastTried;

    private Server(AgentArgs args, Path dir, HttpServer http, SwappableCollector collector, Compiled c,
            ConfigLoader loader) {
        this.args = args;
        this.loader = loader;
        this.dir = dir;
        this.config = dir == null || args.configFile == null
                ? null
                : dir.resolve(java.nio.file.Paths.get(args.configFile).getFileName());
        this.http = http;
        this.collector = collector;
        this.current = c;
        this.started = c;
        this.lastTried = c.sha256;
    }

    /**
     * Binds the port and starts serving the compiled config; loader reads and compiles the config file on each
     * reload ({@link #startReloader}).
     *
     * @throws java.net.BindException when the port is taken or not permitted
     * @throws java.net.UnknownHostException when the host does not resolve
     */
    static Server start(AgentArgs args, Path dir, Compiled c, PrometheusProperties props, ConfigLoader loader)
            throws IOException {
        InetSocketAddress addr = args.host.isEmpty()
                ? new InetSocketAddress(args.port)
                : new InetSocketAddress(InetAddress.getByName(args.host), args.port);
        HttpsConfigurator https = c.http.httpsConfigurator();
        HttpServer server;
        if (https != null) {
            HttpsServer s = HttpsServer.create(addr, 3);
            s.setHttpsConfigurator(https);
            server = s;
        } else {
            server = HttpServer.create(addr, 3);
        }
        boolean ok = false;
        try {
            PrometheusRegistry registry = new PrometheusRegistry();
            registerJvmMetrics(c, registry, props);
            SwappableCollector sc = new SwappableCollector(c.collector);
            registry.register(sc);
            boolean ssl = https != null;
            Authenticator auth = c.http.authenticator == null ? null : new HeadersAuthenticator(c.http.authenticator, ssl);
            context(server, "/", new DefaultHandler(c.http.metricsPath), auth, ssl);
            context(server, c.http.metricsPath, new MetricsHandler(props, registry), auth, ssl);
            context(server, "/-/healthy", new HealthyHandler(), auth, ssl);
            server.setExecutor(executor(c.http));
            startDaemon(server);
            ok = true;
            return new Server(args, dir, server, sc, c, loader);
        } finally {
            if (!ok) {
                server.stop(0);
            }
        }
    }

    /** Registers the JVM metrics jmx_exporter's agent registers, unless the config excludes them. */
    static void registerJvmMetrics(Compiled c, PrometheusRegistry registry, PrometheusProperties props) {
        new BuildInfoMetrics().register(registry);
        if (!c.excludeJvmMetrics) {
            JvmMetrics.builder(props).register(registry);
        }
    }

    private static void context(HttpServer s, String path, HttpHandler h, Authenticator auth, boolean ssl) {
        try {
            s.removeContext(path);
        } catch (IllegalArgumentException e) {
            // Not there yet.
        }
        HttpContext ctx = s.createContext(path, new HeadersHandler(h, ssl));
        if (auth != null) {
            ctx.setAuthenticator(auth);
        }
    }

    /**
     * Starts the server from a daemon thread: the JDK's dispatcher thread inherits its creator's daemon status,
     * and a non-daemon dispatcher would keep the JVM from ending when the application's main returns.
     */
    private static void startDaemon(final HttpServer server) throws IOException {
        final Throwable[] failed = new Throwable[1];
        Thread t = new Thread(new Runnable() {
            @Override
            public void run() {
                try {
                    server.start();
                } catch (Throwable e) {
                    failed[0] = e;
                }
            }
        }, "handlerkit-jmx-agent-start");
        t.setDaemon(true);
        t.start();
        try {
            t.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while starting the HTTP server", e);
        }
        if (failed[0] != null) {
            throw new IOException("cannot start the HTTP server: " + failed[0], failed[0]);
        }
    }

    private static ThreadPoolExecutor executor(HttpServerConfig c) {
        final AtomicInteger n = new AtomicInteger();
        ThreadFactory tf = new ThreadFactory() {
            @Override
            public Thread newThread(Runnable r) {
                Thread t = new Thread(r, "handlerkit-jmx-agent-http-" + n.incrementAndGet());
                t.setDaemon(true);
                return t;
            }
        };
        // Like jmx_exporter: a hand-off queue, and a full pool makes the dispatcher wait for a free thread.
        RejectedExecutionHandler block = new RejectedExecutionHandler() {
            @Override
            public void rejectedExecution(Runnable r, ThreadPoolExecutor e) {
                if (e.isShutdown()) {
                    return;
                }
                try {
                    e.getQueue().put(r);
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                }
            }
        };
        return new ThreadPoolExecutor(c.minThreads, c.maxThreads, c.keepAliveSeconds, TimeUnit.SECONDS,
                new SynchronousQueue<Runnable>(true), tf, block);
    }

    /** Describes the server for the refusal of a second agent. */
    String describe() {
        return "port " + args.port + ", config " + (config != null ? config.toString()
                : AgentArgs.ENV_PREFIX + args.configEnv);
    }

    /** Writes the status; a failure leaves the old file. */
    synchronized void writeStatus() {
        if (dir == null) {
            return;
        }
        try {
            status.write(dir);
        } catch (Throwable t) {
            // The reloader tries again on the next change.
        }
    }

    /** Starts the daemon thread that reloads the config when its bytes change; none without a config file. */
    void startReloader() {
        if (config == null) {
            return;
        }
        Thread t = new Thread(new Runnable() {
            @Override
            public void run() {
                while (true) {
                    try {
                        Thread.sleep(RELOAD_INTERVAL_MILLIS);
                        reloadIfChanged();
                    } catch (InterruptedException e) {
                        return;
                    } catch (Throwable t) {
                        // Never let the reloader die: the next poll tries again.
                    }
                }
            }
        }, "handlerkit-jmx-agent-reload");
        t.setDaemon(true);
        t.start();
    }

    /**
     * Reloads the config if its bytes differ from those last tried. The file is read once: the bytes compared are
     * the bytes compiled, even when the file is replaced meanwhile.
     */
    void reloadIfChanged() {
        ConfigLoader.Bytes bytes;
        try {
            bytes = loader.read(config);
        } catch (ConfigException e) {
            // Not a regular file, or too large: refused unopened, and reported once.
            String key = "refused: " + e.getMessage();
            if (!key.equals(lastTried)) {
                Status.Reload r = new Status.Reload();
                r.configSHA256 = "";
                r.ok = false;
                r.message = e.getMessage();
                record(r, null, key);
            }
            return;
        } catch (Throwable t) {
            // A missing or unreadable file (being replaced) keeps the config in force.
            return;
        }
        if (bytes.sha256.equals(lastTried)) {
            return;
        }
        Status.Reload r = new Status.Reload();
        Compiled next = null;
        try {
            next = loader.compile(config, bytes);
            r.configSHA256 = next.sha256;
            r.ok = true;
        } catch (Compiled.Failure f) {
            r.configSHA256 = f.sha256.isEmpty() ? bytes.sha256 : f.sha256;
            r.ok = false;
            r.message = f.getMessage() == null ? "" : f.getMessage();
        } catch (Throwable t) {
            r.configSHA256 = bytes.sha256;
            r.ok = false;
            r.message = Agent.describe(t);
        }
        record(r, next, r.configSHA256);
    }

    /** Records a reload attempt in the status and applies next when it is not null; tried names the attempt. */
    private void record(Status.Reload r, Compiled next, String tried) {
        synchronized (this) {
            lastTried = tried;
            Status st = status.copy();
            st.reload = r;
            if (next != null) {
                collector.set(next.collector);
                current = next;
                st.configSHA256 = next.sha256;
                st.restartRequired = started.restartRequired(next);
            }
            status = st;
            writeStatus();
        }
    }

    /**
     * SwappableCollector is the registry's one handle on the collector in force, swapped by a reload. Each
     * collector registers into a registry of its own (with its jmx_scrape_* and jmx_config_reload_* metrics), and
     * the handle scrapes that registry, so that a swap never registers a metric name twice.
     */
    static final class SwappableCollector implements MultiCollector {
        private volatile PrometheusRegistry inner;

        SwappableCollector(JmxCollector c) {
            set(c);
        }

        void set(JmxCollector c) {
            PrometheusRegistry r = new PrometheusRegistry();
            c.register(r);
            inner = r;
        }

        @Override
        public MetricSnapshots collect() {
            return inner.scrape();
        }

        @Override
        public MetricSnapshots collect(PrometheusScrapeRequest request) {
            return inner.scrape(request);
        }

        @Override
        public MetricSnapshots collect(Predicate<String> includedNames) {
            return inner.scrape(includedNames);
        }

        @Override
        public MetricSnapshots collect(Predicate<String> includedNames, PrometheusScrapeRequest request) {
            return inner.scrape(includedNames, request);
        }
    }

    /** HeadersHandler adds jmx_exporter's security headers to every response. */
    static final class HeadersHandler implements HttpHandler {
        private final HttpHandler delegate;
        private final boolean ssl;

        HeadersHandler(HttpHandler delegate, boolean ssl) {
            this.delegate = delegate;
            this.ssl = ssl;
        }

        @Override
        public void handle(HttpExchange exchange) throws IOException {
            headers(exchange, ssl);
            delegate.handle(exchange);
        }
    }

    /** HeadersAuthenticator adds the security headers to responses the authenticator refuses (401) too. */
    static final class HeadersAuthenticator extends Authenticator {
        private final Authenticator delegate;
        private final boolean ssl;

        HeadersAuthenticator(Authenticator delegate, boolean ssl) {
            this.delegate = delegate;
            this.ssl = ssl;
        }

        @Override
        public Result authenticate(HttpExchange exchange) {
            headers(exchange, ssl);
            return delegate.authenticate(exchange);
        }
    }

    static void headers(HttpExchange exchange, boolean ssl) {
        exchange.getResponseHeaders().set("X-Content-Type-Options", "nosniff");
        exchange.getResponseHeaders().set("X-Frame-Options", "DENY");
        if (ssl) {
            exchange.getResponseHeaders().set("Strict-Transport-Security", "max-age=31536000");
        }
    }
}
