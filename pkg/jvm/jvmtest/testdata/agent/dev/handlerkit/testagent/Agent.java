package dev.handlerkit.testagent;

import com.sun.net.httpserver.HttpServer;

import java.io.IOException;
import java.io.OutputStream;
import java.lang.instrument.Instrumentation;
import java.lang.management.ManagementFactory;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Set;
import java.util.concurrent.Executors;

import javax.management.MBeanAttributeInfo;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import javax.management.openmbean.CompositeData;

/**
 * Stand-in for the Prometheus jmx_exporter java agent in tests.
 *
 * It accepts jmx_exporter's agent argument, [host:]port:config, and behaves like jmx_exporter where that matters
 * to the loader: it calls System.exit when it cannot start (config unreadable, port taken), so a loader that skips
 * its pre-checks takes the user's JVM down. Once started it serves /metrics in the Prometheus text format with
 * values read from real MBeans through the platform MBeanServer.
 *
 * The argument "throw" makes agentmain throw instead, so tests can see how the JVM reports a failed agent start.
 */
public final class Agent {
    private Agent() {
    }

    public static void premain(String args, Instrumentation inst) {
        start(args);
    }

    public static void agentmain(String args, Instrumentation inst) {
        if ("throw".equals(args)) {
            throw new IllegalStateException("test agent asked to fail");
        }
        start(args);
    }

    private static void start(String args) {
        try {
            if (args == null || args.isEmpty()) {
                throw new IllegalArgumentException("usage: [host:]<port>:<config.yaml>");
            }
            int last = args.lastIndexOf(':');
            if (last < 0) {
                throw new IllegalArgumentException("usage: [host:]<port>:<config.yaml>");
            }
            String config = args.substring(last + 1);
            String hostPort = args.substring(0, last);
            String host = "0.0.0.0";
            int sep = hostPort.lastIndexOf(':');
            if (sep >= 0) {
                host = hostPort.substring(0, sep);
                if (host.startsWith("[") && host.endsWith("]")) {
                    host = host.substring(1, host.length() - 1);
                }
                hostPort = hostPort.substring(sep + 1);
            }
            int port = Integer.parseInt(hostPort);
            // jmx_exporter refuses to start without a readable config; so does this agent.
            Files.readAllBytes(Paths.get(config));

            HttpServer server = HttpServer.create(new InetSocketAddress(host, port), 16);
            server.createContext("/metrics", exchange -> {
                byte[] body;
                int status = 200;
                try {
                    body = render().getBytes(StandardCharsets.UTF_8);
                } catch (Exception e) {
                    status = 500;
                    body = ("error: " + e + "\n").getBytes(StandardCharsets.UTF_8);
                }
                exchange.getResponseHeaders().set("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
                exchange.sendResponseHeaders(status, body.length);
                try (OutputStream out = exchange.getResponseBody()) {
                    out.write(body);
                }
            });
            server.setExecutor(Executors.newFixedThreadPool(2, r -> {
                Thread t = new Thread(r, "handlerkit-test-agent-http");
                t.setDaemon(true);
                return t;
            }));
            server.start();
            System.err.println("handlerkit test agent: serving /metrics on " + host + ":" + port);
        } catch (Throwable t) {
            System.err.println("handlerkit test agent: cannot start: " + t);
            System.exit(1);
        }
    }

    private static String render() throws Exception {
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        StringBuilder sb = new StringBuilder();
        CompositeData heap = (CompositeData) server.getAttribute(new ObjectName("java.lang:type=Memory"),
                "HeapMemoryUsage");
        sb.append("# HELP jvm_memory_bytes_used Used bytes of a given JVM memory area.\n");
        sb.append("# TYPE jvm_memory_bytes_used gauge\n");
        sb.append("jvm_memory_bytes_used{area=\"heap\"} ").append(((Number) heap.get("used")).longValue())
                .append('\n');

        Set<ObjectName> names = server.queryNames(new ObjectName("dev.handlerkit.sample:*"), null);
        for (ObjectName name : names) {
            String type = name.getKeyProperty("type");
            if (type == null) {
                continue;
            }
            for (MBeanAttributeInfo attr : server.getMBeanInfo(name).getAttributes()) {
                Object value = server.getAttribute(name, attr.getName());
                if (value instanceof Number) {
                    String metric = ("handlerkit_sample_" + type + "_" + attr.getName()).toLowerCase();
                    sb.append("# TYPE ").append(metric).append(" untyped\n");
                    sb.append(metric).append(' ').append(((Number) value).doubleValue()).append('\n');
                }
            }
        }
        return sb.toString();
    }
}
