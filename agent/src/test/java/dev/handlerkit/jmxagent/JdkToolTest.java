package dev.handlerkit.jmxagent;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNull;

import org.junit.Test;

/** Which sun.java.command values are JDK tools, which premain stays out of. */
public class JdkToolTest {

    @Test
    public void jdkToolsAreRecognised() {
        String[][] cases = {
            {"jdk.jcmd/sun.tools.jcmd.JCmd 4242 VM.flags", "sun.tools.jcmd.JCmd"},
            {"jdk.jcmd/sun.tools.jps.Jps -l", "sun.tools.jps.Jps"},
            {"jdk.jshell/jdk.internal.jshell.tool.JShellToolProvider", "jdk.internal.jshell.tool.JShellToolProvider"},
            {"java.base/sun.security.tools.keytool.Main -list", "sun.security.tools.keytool.Main"},
            {"jdk.jfr/jdk.jfr.internal.tool.Main print x.jfr", "jdk.jfr.internal.tool.Main"},
            {"jdk.compiler/com.sun.tools.javac.Main", "com.sun.tools.javac.Main"},
            // Java 8: no modules
            {"sun.tools.jcmd.JCmd 1 help", "sun.tools.jcmd.JCmd"},
            {"sun.tools.jstack.JStack 1", "sun.tools.jstack.JStack"},
        };
        for (String[] c : cases) {
            assertEquals(c[0], c[1], Agent.jdkTool(c[0]));
        }
    }

    @Test
    public void applicationsAreNot() {
        String[] cases = {
            null, "", " ", "app.jar", "/opt/app/app.jar --port 8080", "com.example.Main", "dev.handlerkit.sample.SampleApp",
            "org.apache.catalina.startup.Bootstrap start", "com.example.app/com.example.Main",
            // An application's own package that only looks like a tool's is not one.
            "sun.toolsx.Main",
        };
        for (String c : cases) {
            assertNull(c, Agent.jdkTool(c));
        }
    }
}
