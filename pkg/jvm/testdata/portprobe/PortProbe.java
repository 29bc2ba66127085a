import com.sun.net.httpserver.HttpServer;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;

/**
 * Opens and closes a server socket exactly as the Prometheus jmx_exporter agent does (HttpServer.create on
 * [host:]port), for each line "host port" read from stdin ("-" as host means no host, the wildcard), and answers
 * "ok" or "FAIL <message>" on stdout. The pkg/jvm tests compare CheckPort's verdict with the JVM's own.
 *
 * Run it with the source launcher: java PortProbe.java
 */
public final class PortProbe {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.trim().split(" ");
            int port = Integer.parseInt(f[1]);
            InetSocketAddress addr = f[0].equals("-") ? new InetSocketAddress(port) : new InetSocketAddress(f[0], port);
            String verdict;
            try {
                HttpServer server = HttpServer.create(addr, 3);
                server.start();
                server.stop(0);
                verdict = "ok";
            } catch (Exception e) {
                verdict = "FAIL " + e;
            }
            System.out.println(verdict);
        }
    }
}
