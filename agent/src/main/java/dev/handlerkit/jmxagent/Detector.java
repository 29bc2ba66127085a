package dev.handlerkit.jmxagent;

import java.io.File;
import java.io.IOException;
import java.lang.instrument.Instrumentation;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.jar.Attributes;
import java.util.jar.JarFile;
import java.util.jar.Manifest;

/**
 * Detector looks for a jmx_exporter agent or collector already in the JVM: a {@code -javaagent:} naming a
 * jmx_exporter jar on the command line, in {@code JAVA_TOOL_OPTIONS} or {@code JDK_JAVA_OPTIONS}, or jmx_exporter's
 * agent or collector classes among the loaded classes.
 *
 * <p>The class and package names are built at run time: the shade plugin rewrites string constants that look like
 * the relocated packages, which would make the agent look for its own relocated copies instead.
 */
final class Detector {

    /** jmx_exporter's package, unrelocated. */
    static final String JMX_PACKAGE = String.join(".", "io", "prometheus", "jmx");

    private static final String JAVA_AGENT_CLASS = JMX_PACKAGE + "." + "JavaAgent";
    private static final String COLLECTOR_CLASS = JMX_PACKAGE + "." + "JmxCollector";

    private Detector() {}

    /**
     * Returns a description of the jmx_exporter agent or collector found in this JVM, or null when there is none.
     *
     * @param inst the JVM's instrumentation, or null
     * @param ownJar this agent's own jar, which is never reported
     */
    static String find(Instrumentation inst, File ownJar) {
        List<String> args = new ArrayList<>();
        try {
            args.addAll(ManagementFactory.getRuntimeMXBean().getInputArguments());
        } catch (Throwable t) {
            // Some JVMs restrict the management API; the other sources still count.
        }
        String found = findInArgs(args, ownJar, "the JVM's command line");
        if (found != null) {
            return found;
        }
        for (String env : new String[] {"JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"}) {
            String v = null;
            try {
                v = System.getenv(env);
            } catch (SecurityException e) {
                // Treated as unset.
            }
            if (v != null) {
                found = findInArgs(split(v), ownJar, env);
                if (found != null) {
                    return found;
                }
            }
        }
        if (inst != null) {
            for (Class<?> c : inst.getAllLoadedClasses()) {
                String n = c.getName();
                if (n.equals(JAVA_AGENT_CLASS) || n.equals(COLLECTOR_CLASS)) {
                    return "jmx_exporter class " + n + " is loaded in this JVM";
                }
            }
        }
        return null;
    }

    private static String findInArgs(List<String> args, File ownJar, String where) {
        for (String a : args) {
            if (!a.startsWith("-javaagent:")) {
                continue;
            }
            String spec = a.substring("-javaagent:".length());
            int eq = spec.indexOf('=');
            String path = eq >= 0 ? spec.substring(0, eq) : spec;
            if (isJmxExporterJar(path, ownJar)) {
                return "-javaagent:" + path + " (a jmx_exporter agent) in " + where;
            }
        }
        return null;
    }

    /** Reports whether the jar at path is jmx_exporter's agent: by its file name, or by its manifest's classes. */
    static boolean isJmxExporterJar(String path, File ownJar) {
        File f = new File(path);
        if (ownJar != null && same(f, ownJar)) {
            return false;
        }
        if (f.getName().toLowerCase(Locale.ROOT).startsWith("jmx_prometheus")) {
            return true;
        }
        try (JarFile jar = new JarFile(f, false)) {
            Manifest m = jar.getManifest();
            if (m == null) {
                return false;
            }
            Attributes attrs = m.getMainAttributes();
            for (String key : new String[] {"Premain-Class", "Agent-Class"}) {
                String cls = attrs.getValue(key);
                if (cls != null && cls.trim().startsWith(JMX_PACKAGE + ".")) {
                    return true;
                }
            }
        } catch (IOException | RuntimeException e) {
            // Not readable (another mount namespace, a missing file): judged by its name only.
        }
        return false;
    }

    private static boolean same(File a, File b) {
        try {
            return a.getCanonicalFile().equals(b.getCanonicalFile());
        } catch (IOException e) {
            return a.getAbsoluteFile().equals(b.getAbsoluteFile());
        }
    }

    /** Splits an options variable the way the launcher does: on white space, with single or double quotes. */
    static List<String> split(String s) {
        List<String> out = new ArrayList<>();
        StringBuilder cur = new StringBuilder();
        boolean in = false;
        char quote = 0;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (quote != 0) {
                if (c == quote) {
                    quote = 0;
                } else {
                    cur.append(c);
                }
            } else if (c == '"' || c == '\'') {
                quote = c;
                in = true;
            } else if (Character.isWhitespace(c)) {
                if (in) {
                    out.add(cur.toString());
                    cur.setLength(0);
                    in = false;
                }
            } else {
                cur.append(c);
                in = true;
            }
        }
        if (in) {
            out.add(cur.toString());
        }
        return out;
    }
}
