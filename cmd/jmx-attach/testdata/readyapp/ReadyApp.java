import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;

/**
 * A JVM application with a readiness check of its own: GET /ready on 127.0.0.1:${ready.port} answers "ready"
 * while the application runs. The corpus test asks it after every injection attempt, so that "alive" means
 * the application still serves, not only that the process exists. It prints the sample application's ready
 * line once it serves.
 */
public final class ReadyApp {
    private ReadyApp() {
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(System.getProperty("ready.port"));
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 0);
        server.createContext("/ready", exchange -> {
            byte[] body = "ready\n".getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
        });
        server.start();
        System.out.println("handlerkit sample app ready");
        System.out.flush();
        while (true) {
            Thread.sleep(1000);
        }
    }
}
