package dev.handlerkit.jmxagent;

import com.sun.net.httpserver.Authenticator;
import com.sun.net.httpserver.BasicAuthenticator;
import com.sun.net.httpserver.HttpsConfigurator;
import com.sun.net.httpserver.HttpsParameters;
import io.prometheus.jmx.variable.VariableResolver;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.MessageDigest;
import java.security.Principal;
import java.security.PrivateKey;
import java.security.cert.X509Certificate;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.PBEKeySpec;
import javax.net.ssl.KeyManager;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.TrustManager;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509ExtendedKeyManager;
import javax.net.ssl.X509KeyManager;

/**
 * HttpServerConfig is the {@code httpServer} section of a jmx_exporter config, parsed and checked with the
 * semantics of jmx_exporter 1.x (jmx_prometheus_common's HTTPServerFactory): the metrics path, the worker thread
 * pool, basic authentication (plaintext, salted SHA digests, PBKDF2) or an authenticator plugin class, and TLS from
 * a key store, optionally with client certificates (mutual TLS).
 *
 * <p>Every check runs in {@link #parse}, before any port is bound, so that a bad section is reported and nothing
 * starts. Error messages use jmx_exporter's key paths.
 */
final class HttpServerConfig {

    private static final String PLAINTEXT = "plaintext";
    private static final List<String> SHA = Arrays.asList("SHA-1", "SHA-256", "SHA-512");
    private static final Map<String, Integer> PBKDF2_ITERATIONS = new HashMap<>();

    static {
        PBKDF2_ITERATIONS.put("PBKDF2WithHmacSHA1", 1300000);
        PBKDF2_ITERATIONS.put("PBKDF2WithHmacSHA256", 600000);
        PBKDF2_ITERATIONS.put("PBKDF2WithHmacSHA512", 210000);
    }

    /** Largest key or trust store read (4 MiB): a bigger file is refused unread. */
    static final int MAX_STORE_BYTES = 4 << 20;

    /**
     * Most PBKDF2 iterations accepted: above every default here (1,300,000 for PBKDF2WithHmacSHA1), and a bound on
     * what one request with a wrong password costs the application's CPU.
     */
    static final int MAX_PBKDF2_ITERATIONS = 2000000;

    /** Longest PBKDF2 hash accepted, in bits: each block of the hash's length costs all the iterations again. */
    static final int MAX_PBKDF2_KEY_BITS = 1024;

    /** Path of the metrics endpoint; default /metrics. */
    String metricsPath = "/metrics";

    int minThreads = 1;
    int maxThreads = 10;
    int keepAliveSeconds = 120;

    /** Null without authentication. */
    Authenticator authenticator;

    /** Null without a plugin's subject attribute. */
    String subjectAttributeName;

    /** Null without TLS. */
    SSLContext sslContext;

    boolean mutualTLS;
    String[] protocols;
    String[] ciphers;

    /**
     * The digest of the section as parsed from YAML ({@link YamlGraph#digest}), to tell whether a reload changed
     * it. The parsed section itself is not kept: its aliases may make it a tree far too big to compare or print.
     */
    String sectionDigest;

    private HttpServerConfig() {}

    /**
     * Parses and checks the httpServer section of the whole config document.
     *
     * @param root the config document (a YAML map), or null for an empty document
     * @return the checked configuration
     * @throws ConfigException when the section is invalid
     */
    static HttpServerConfig parse(Map<?, ?> root) {
        HttpServerConfig c = new HttpServerConfig();
        if (root == null || !root.containsKey("httpServer")) {
            c.sectionDigest = YamlGraph.digest(null);
            return c;
        }
        Object section = root.get("httpServer");
        c.sectionDigest = YamlGraph.digest(section);
        Map<?, ?> http = map(section, "/httpServer must be a map");
        if (http.containsKey("metrics") && http.get("metrics") instanceof Map) {
            Map<?, ?> metrics = (Map<?, ?>) http.get("metrics");
            if (!metrics.containsKey("path")) {
                throw new ConfigException("/httpServer/metrics/path is a required string");
            }
            c.metricsPath = nonBlank(metrics.get("path"), "/httpServer/metrics/path");
        }
        if (http.containsKey("threads") && http.get("threads") instanceof Map) {
            Map<?, ?> threads = (Map<?, ?>) http.get("threads");
            c.minThreads = integer(threads, "minimum", "/httpServer/threads/minimum", 1,
                    "must be 1 or greater");
            c.maxThreads = integer(threads, "maximum", "/httpServer/threads/maximum", c.minThreads,
                    "must be greater than or equal to /httpServer/threads/minimum");
            c.keepAliveSeconds = integer(threads, "keepAliveTime", "/httpServer/threads/keepAliveTime", 1,
                    "must be greater than 0");
        }
        if (http.containsKey("authentication")) {
            c.parseAuthentication(http.get("authentication"));
        }
        if (http.containsKey("ssl")) {
            c.parseSSL(http.get("ssl"));
        }
        return c;
    }

    private void parseAuthentication(Object value) {
        Map<?, ?> auth = value instanceof Map ? (Map<?, ?>) value : Collections.emptyMap();
        if (auth.containsKey("plugin")) {
            Map<?, ?> plugin = map(auth.get("plugin"), "/httpServer/authentication/plugin must be a map");
            if (!plugin.containsKey("class")) {
                throw new ConfigException("/httpServer/authentication/plugin/class must be a string");
            }
            String className = nonBlank(plugin.get("class"), "/httpServer/authentication/plugin/class");
            if (plugin.containsKey("subjectAttributeName")) {
                subjectAttributeName = nonBlank(plugin.get("subjectAttributeName"),
                        "/httpServer/authentication/plugin/subjectAttributeName");
            }
            authenticator = loadPlugin(className);
            return;
        }
        Map<?, ?> basic = map(auth.get("basic"), "/httpServer/authentication/basic configuration must be a map");
        if (!basic.containsKey("username")) {
            throw new ConfigException("/httpServer/authentication/basic/username is a required string");
        }
        String username = resolve(nonBlank(basic.get("username"), "/httpServer/authentication/basic/username"));
        String algorithm = basic.containsKey("algorithm")
                ? nonBlank(basic.get("algorithm"), "/httpServer/authentication/basic/algorithm")
                : PLAINTEXT;
        if (PLAINTEXT.equalsIgnoreCase(algorithm)) {
            if (!basic.containsKey("password")) {
                throw new ConfigException("/httpServer/authentication/basic/password is a required string");
            }
            String password = resolve(nonBlank(basic.get("password"), "/httpServer/authentication/basic/password"));
            authenticator = new Basic(username, new Plaintext(password));
            return;
        }
        boolean sha = SHA.contains(algorithm);
        if (!sha && !PBKDF2_ITERATIONS.containsKey(algorithm)) {
            throw new ConfigException("Unsupported /httpServer/authentication/basic/algorithm [" + algorithm + "]");
        }
        if (!basic.containsKey("passwordHash")) {
            throw new ConfigException("/httpServer/authentication/basic/passwordHash is a required string");
        }
        String hash = nonBlank(basic.get("passwordHash"), "/httpServer/authentication/basic/passwordHash");
        if (!basic.containsKey("salt")) {
            throw new ConfigException("/httpServer/authentication/basic/salt is a required string");
        }
        String salt = nonBlank(basic.get("salt"), "/httpServer/authentication/basic/salt");
        byte[] want = hex(hash);
        if (sha) {
            try {
                MessageDigest.getInstance(algorithm);
            } catch (GeneralSecurityException e) {
                throw new ConfigException("Invalid /httpServer/authentication/basic/algorithm, unsupported algorithm ["
                        + algorithm + "]");
            }
            authenticator = new Basic(username, new Digest(algorithm, salt, want));
            return;
        }
        int iterations = basic.containsKey("iterations")
                ? integer(basic, "iterations", "/httpServer/authentication/basic/iterations", 1, "must be greater than 0")
                : PBKDF2_ITERATIONS.get(algorithm);
        int keyLength = basic.containsKey("keyLength")
                ? integer(basic, "keyLength", "/httpServer/authentication/basic/keyLength", 1, "must be greater than 0")
                : 128;
        if (iterations > MAX_PBKDF2_ITERATIONS) {
            throw new ConfigException("Invalid configuration for /httpServer/authentication/basic/iterations must be at"
                    + " most " + MAX_PBKDF2_ITERATIONS + " (the agent's cap: every request with a wrong password costs"
                    + " them), not " + iterations);
        }
        // keyLength counts bits; jmx_exporter before 1.5 counted bytes, and both readings are accepted.
        int bits = want.length * 8;
        if (bits > MAX_PBKDF2_KEY_BITS || keyLength > MAX_PBKDF2_KEY_BITS) {
            throw new ConfigException("Invalid configuration for /httpServer/authentication/basic/keyLength must be at"
                    + " most " + MAX_PBKDF2_KEY_BITS + " bits, as must the passwordHash (" + bits + " bits)");
        }
        if (bits != keyLength && want.length != keyLength) {
            throw new ConfigException(String.format(
                    "PBKDF2 passwordHash length (%d bytes / %d bits) does not match configured keyLength (%d bits)",
                    want.length, bits, keyLength));
        }
        try {
            SecretKeyFactory.getInstance(algorithm);
        } catch (GeneralSecurityException e) {
            throw new ConfigException("Invalid /httpServer/authentication/basic/algorithm, unsupported algorithm ["
                    + algorithm + "]");
        }
        authenticator = new Basic(username, new Pbkdf2(algorithm, salt, iterations, bits, want));
    }

    private static Authenticator loadPlugin(String className) {
        Class<?> cls;
        try {
            cls = Class.forName(className, false, ClassLoader.getSystemClassLoader());
        } catch (ClassNotFoundException | LinkageError e) {
            throw new ConfigException("configured /httpServer/authentication/plugin/class [" + className
                    + "] not found: " + e);
        }
        if (!Authenticator.class.isAssignableFrom(cls)) {
            throw new ConfigException("configured /httpServer/authentication/plugin/class [" + className
                    + "] is not a com.sun.net.httpserver.Authenticator");
        }
        try {
            return (Authenticator) cls.getDeclaredConstructor().newInstance();
        } catch (Exception | LinkageError e) {
            throw new ConfigException("configured /httpServer/authentication/plugin/class [" + className
                    + "] could not be constructed: " + e);
        }
    }

    private void parseSSL(Object value) {
        Map<?, ?> ssl = value instanceof Map ? (Map<?, ?>) value : Collections.emptyMap();
        Map<?, ?> keyStore = ssl.get("keyStore") instanceof Map ? (Map<?, ?>) ssl.get("keyStore") : Collections.emptyMap();
        String file = keyStore.containsKey("filename")
                ? nonBlank(keyStore.get("filename"), "/httpServer/ssl/keyStore/filename")
                : System.getProperty("javax.net.ssl.keyStore");
        if (file == null) {
            throw new ConfigException("SSL keyStore filename must be configured via /httpServer/ssl/keyStore/filename"
                    + " or system property javax.net.ssl.keyStore");
        }
        String type = keyStore.containsKey("type")
                ? nonBlank(keyStore.get("type"), "/httpServer/ssl/keyStore/type")
                : defaultType("javax.net.ssl.keyStoreType");
        String password = keyStore.containsKey("password")
                ? nonBlank(keyStore.get("password"), "/httpServer/ssl/keyStore/password")
                : System.getProperty("javax.net.ssl.keyStorePassword");
        password = resolve(password);
        if (password == null) {
            throw new ConfigException("SSL keyStore password must be configured via /httpServer/ssl/keyStore/password"
                    + " or system property javax.net.ssl.keyStorePassword");
        }
        Map<?, ?> certificate =
                ssl.get("certificate") instanceof Map ? (Map<?, ?>) ssl.get("certificate") : Collections.emptyMap();
        if (!certificate.containsKey("alias")) {
            throw new ConfigException("/httpServer/ssl/certificate/alias is a required string");
        }
        String alias = nonBlank(certificate.get("alias"), "/httpServer/ssl/certificate/alias");
        if (ssl.containsKey("mutualTLS")) {
            mutualTLS = bool(ssl.get("mutualTLS"), "/httpServer/ssl/mutualTLS");
        }
        protocols = list(ssl, "protocols");
        ciphers = list(ssl, "ciphers");
        try {
            KeyStore ks = loadStore(file, type, password, "keyStore");
            if (!ks.containsAlias(alias) || !ks.isKeyEntry(alias)) {
                throw new ConfigException("Exception loading SSL configuration, /httpServer/ssl/certificate/alias ["
                        + alias + "] is not a key entry in keyStore [" + file + "]");
            }
            KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            kmf.init(ks, password.toCharArray());
            KeyManager[] kms = kmf.getKeyManagers();
            for (int i = 0; i < kms.length; i++) {
                if (kms[i] instanceof X509KeyManager) {
                    kms[i] = new AliasKeyManager((X509KeyManager) kms[i], alias);
                }
            }
            TrustManager[] tms = null;
            if (mutualTLS) {
                tms = trustManagers(ssl);
            }
            SSLContext ctx = SSLContext.getInstance("TLS");
            ctx.init(kms, tms, null);
            if (protocols != null || ciphers != null) {
                SSLParameters supported = ctx.getSupportedSSLParameters();
                check(protocols, supported.getProtocols(), "/httpServer/ssl/protocols");
                check(ciphers, supported.getCipherSuites(), "/httpServer/ssl/ciphers");
            }
            sslContext = ctx;
        } catch (GeneralSecurityException | IOException e) {
            throw new ConfigException("Exception loading SSL configuration, " + e.getMessage(), e);
        }
    }

    private static TrustManager[] trustManagers(Map<?, ?> ssl) throws GeneralSecurityException, IOException {
        Map<?, ?> trust =
                ssl.get("trustStore") instanceof Map ? (Map<?, ?>) ssl.get("trustStore") : Collections.emptyMap();
        String file = trust.containsKey("filename")
                ? nonBlank(trust.get("filename"), "/httpServer/ssl/trustStore/filename")
                : System.getProperty("javax.net.ssl.trustStore");
        if (file == null) {
            throw new ConfigException("SSL trustStore filename must be configured via"
                    + " /httpServer/ssl/trustStore/filename or system property javax.net.ssl.trustStore");
        }
        String type = trust.containsKey("type")
                ? nonBlank(trust.get("type"), "/httpServer/ssl/trustStore/type")
                : defaultType("javax.net.ssl.trustStoreType");
        String password = trust.containsKey("password")
                ? nonBlank(trust.get("password"), "/httpServer/ssl/trustStore/password")
                : System.getProperty("javax.net.ssl.trustStorePassword");
        password = resolve(password);
        if (password == null) {
            throw new ConfigException("SSL trustStore password must be configured via"
                    + " /httpServer/ssl/trustStore/password or system property javax.net.ssl.trustStorePassword");
        }
        KeyStore ts = loadStore(file, type, password, "trustStore");
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(ts);
        return tmf.getTrustManagers();
    }

    private static KeyStore loadStore(String file, String type, String password, String what)
            throws GeneralSecurityException, IOException {
        KeyStore ks;
        try {
            ks = KeyStore.getInstance(type);
        } catch (GeneralSecurityException e) {
            throw new ConfigException("Exception loading SSL configuration, unsupported " + what + " type [" + type
                    + "]");
        }
        byte[] bytes;
        try {
            bytes = BoundedFile.read(Paths.get(file), MAX_STORE_BYTES, what);
        } catch (ConfigException e) {
            throw new ConfigException("Exception loading SSL configuration, " + e.getMessage(), e);
        } catch (IOException e) {
            throw new ConfigException("Exception loading SSL configuration, cannot read " + what + " [" + file
                    + "]: " + e, e);
        }
        try (InputStream in = new ByteArrayInputStream(bytes)) {
            ks.load(in, password.toCharArray());
        } catch (IOException e) {
            throw new ConfigException("Exception loading SSL configuration, cannot load " + what + " [" + file
                    + "]: " + e, e);
        }
        return ks;
    }

    private static void check(String[] wanted, String[] supported, String key) {
        if (wanted == null) {
            return;
        }
        List<String> s = Arrays.asList(supported);
        for (String w : wanted) {
            if (!s.contains(w)) {
                throw new ConfigException("Exception loading SSL configuration, " + key + " [" + w
                        + "] is not supported by this JVM");
            }
        }
    }

    /** Returns the HttpsConfigurator for the server, or null without TLS. */
    HttpsConfigurator httpsConfigurator() {
        if (sslContext == null) {
            return null;
        }
        final boolean needClientAuth = mutualTLS;
        final String[] p = protocols;
        final String[] cs = ciphers;
        return new HttpsConfigurator(sslContext) {
            @Override
            public void configure(HttpsParameters params) {
                SSLParameters sp = getSSLContext().getDefaultSSLParameters();
                sp.setNeedClientAuth(needClientAuth);
                if (p != null) {
                    sp.setProtocols(p);
                }
                if (cs != null) {
                    sp.setCipherSuites(cs);
                }
                params.setSSLParameters(sp);
            }
        };
    }

    private static String defaultType(String property) {
        String t = System.getProperty(property);
        return t != null ? t : KeyStore.getDefaultType();
    }

    private static String resolve(String s) {
        return s == null ? null : VariableResolver.resolveVariable(s);
    }

    private static Map<?, ?> map(Object value, String message) {
        if (!(value instanceof Map)) {
            throw new ConfigException(message);
        }
        return (Map<?, ?>) value;
    }

    /**
     * Refuses a map or a list where a scalar is wanted, before anything calls its toString: through YAML aliases
     * it may stand for a tree of 10^8 nodes.
     */
    private static Object scalar(Object value, String key, String kind) {
        if (value instanceof Map || value instanceof java.util.Collection || value instanceof byte[]) {
            throw new ConfigException("Invalid configuration for " + key + " must be " + kind);
        }
        return value;
    }

    private static String nonBlank(Object value, String key) {
        if (value == null) {
            throw new ConfigException("Invalid configuration for " + key + " must be a string");
        }
        scalar(value, key, "a string");
        String s = value.toString();
        if (s.trim().isEmpty()) {
            throw new ConfigException("Invalid configuration for " + key + " must not be blank");
        }
        return s;
    }

    private static int integer(Map<?, ?> m, String name, String key, int min, String rangeMessage) {
        if (!m.containsKey(name)) {
            throw new ConfigException(key + " is a required integer");
        }
        Object v = scalar(m.get(name), key, "an integer");
        int i;
        try {
            i = Integer.parseInt(String.valueOf(v));
        } catch (NumberFormatException e) {
            throw new ConfigException("Invalid configuration for " + key + " must be an integer");
        }
        if (i < min) {
            throw new ConfigException("Invalid configuration for " + key + " " + rangeMessage);
        }
        return i;
    }

    private static boolean bool(Object v, String key) {
        scalar(v, key, "a boolean");
        if (v instanceof Boolean) {
            return (Boolean) v;
        }
        String s = v == null ? "" : v.toString().trim().toLowerCase(java.util.Locale.ROOT);
        switch (s) {
            case "true":
            case "yes":
            case "on":
            case "1":
                return true;
            case "false":
            case "no":
            case "off":
            case "0":
                return false;
            default:
                throw new ConfigException("Invalid configuration for " + key + " must be a boolean");
        }
    }

    private static String[] list(Map<?, ?> ssl, String name) {
        if (!ssl.containsKey(name)) {
            return null;
        }
        String key = "/httpServer/ssl/" + name;
        String v = nonBlank(ssl.get(name), key);
        String[] parts = v.split(",");
        java.util.ArrayList<String> out = new java.util.ArrayList<>();
        for (String p : parts) {
            if (!p.trim().isEmpty()) {
                out.add(p.trim());
            }
        }
        return out.isEmpty() ? null : out.toArray(new String[0]);
    }

    private static byte[] hex(String hash) {
        String h = hash.toLowerCase(java.util.Locale.ROOT).replace(":", "");
        if (h.length() % 2 != 0) {
            throw new ConfigException("Invalid configuration for /httpServer/authentication/basic/passwordHash:"
                    + " hex string must have an even length");
        }
        byte[] out = new byte[h.length() / 2];
        for (int i = 0; i < h.length(); i += 2) {
            int hi = Character.digit(h.charAt(i), 16);
            int lo = Character.digit(h.charAt(i + 1), 16);
            if (hi < 0 || lo < 0) {
                throw new ConfigException("Invalid configuration for /httpServer/authentication/basic/passwordHash:"
                        + " hex string contains a non-hexadecimal character");
            }
            out[i / 2] = (byte) ((hi << 4) | lo);
        }
        return out;
    }

    /** Checker tells whether a password is right. */
    private interface Checker {
        boolean check(String password);
    }

    private static final class Plaintext implements Checker {
        private final byte[] want;

        Plaintext(String password) {
            want = password.getBytes(StandardCharsets.UTF_8);
        }

        @Override
        public boolean check(String password) {
            return MessageDigest.isEqual(want, password.getBytes(StandardCharsets.UTF_8));
        }
    }

    /** Digest: the hex digest of salt + ":" + password, as jmx_exporter computes it. */
    private static final class Digest implements Checker {
        private final String algorithm;
        private final String salt;
        private final byte[] want;

        Digest(String algorithm, String salt, byte[] want) {
            this.algorithm = algorithm;
            this.salt = salt;
            this.want = want;
        }

        @Override
        public boolean check(String password) {
            try {
                MessageDigest md = MessageDigest.getInstance(algorithm);
                byte[] got = md.digest((salt + ":" + password).getBytes(StandardCharsets.UTF_8));
                return MessageDigest.isEqual(want, got);
            } catch (GeneralSecurityException e) {
                return false;
            }
        }
    }

    /** Pbkdf2: PBKDF2 of the password with the UTF-8 salt, as jmx_exporter computes it. */
    private static final class Pbkdf2 implements Checker {
        private final String algorithm;
        private final byte[] salt;
        private final int iterations;
        private final int bits;
        private final byte[] want;

        Pbkdf2(String algorithm, String salt, int iterations, int bits, byte[] want) {
            this.algorithm = algorithm;
            this.salt = salt.getBytes(StandardCharsets.UTF_8);
            this.iterations = iterations;
            this.bits = bits;
            this.want = want;
        }

        @Override
        public boolean check(String password) {
            PBEKeySpec spec = new PBEKeySpec(password.toCharArray(), salt, iterations, bits);
            try {
                byte[] got = SecretKeyFactory.getInstance(algorithm).generateSecret(spec).getEncoded();
                return MessageDigest.isEqual(want, got);
            } catch (GeneralSecurityException e) {
                return false;
            } finally {
                spec.clearPassword();
            }
        }
    }

    /**
     * Basic is HTTP basic authentication with realm "/". Right credentials are remembered (at most 100, by
     * SHA-256), so that a slow PBKDF2 runs once per credential rather than once per scrape.
     */
    private static final class Basic extends BasicAuthenticator {
        private static final int MAX_REMEMBERED = 100;
        private final byte[] username;
        private final Checker checker;
        private final Set<String> valid = Collections.newSetFromMap(new ConcurrentHashMap<String, Boolean>());

        Basic(String username, Checker checker) {
            super("/");
            this.username = username.getBytes(StandardCharsets.UTF_8);
            this.checker = checker;
        }

        @Override
        public boolean checkCredentials(String user, String password) {
            if (user == null || password == null) {
                return false;
            }
            String key = Agent.sha256(
                    (user.length() + ":" + user + ":" + password).getBytes(StandardCharsets.UTF_8));
            if (valid.contains(key)) {
                return true;
            }
            boolean userOK = MessageDigest.isEqual(username, user.getBytes(StandardCharsets.UTF_8));
            boolean passwordOK = checker.check(password);
            if (userOK && passwordOK) {
                if (valid.size() < MAX_REMEMBERED) {
                    valid.add(key);
                }
                return true;
            }
            return false;
        }
    }

    /** AliasKeyManager serves the configured alias's certificate only. */
    private static final class AliasKeyManager extends X509ExtendedKeyManager {
        private final X509KeyManager delegate;
        private final String alias;

        AliasKeyManager(X509KeyManager delegate, String alias) {
            this.delegate = delegate;
            this.alias = alias;
        }

        @Override
        public String[] getClientAliases(String keyType, Principal[] issuers) {
            return delegate.getClientAliases(keyType, issuers);
        }

        @Override
        public String chooseClientAlias(String[] keyType, Principal[] issuers, Socket socket) {
            return delegate.chooseClientAlias(keyType, issuers, socket);
        }

        @Override
        public String[] getServerAliases(String keyType, Principal[] issuers) {
            return new String[] {alias};
        }

        @Override
        public String chooseServerAlias(String keyType, Principal[] issuers, Socket socket) {
            return alias;
        }

        @Override
        public String chooseEngineServerAlias(String keyType, Principal[] issuers, SSLEngine engine) {
            return alias;
        }

        @Override
        public X509Certificate[] getCertificateChain(String a) {
            return delegate.getCertificateChain(a);
        }

        @Override
        public PrivateKey getPrivateKey(String a) {
            return delegate.getPrivateKey(a);
        }
    }
}
