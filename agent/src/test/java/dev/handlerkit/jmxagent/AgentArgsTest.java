package dev.handlerkit.jmxagent;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import org.junit.Test;

/** The agent argument: jmx_exporter's file form, unchanged, and the env: form of the start-time injection. */
public class AgentArgsTest {

    @Test
    public void fileFormKeepsJmxExportersMeaning() {
        String[][] cases = {
            // argument, host, port, config file
            {"9404:/etc/jmx/config.yaml", "", "9404", "/etc/jmx/config.yaml"},
            {"localhost:9404:/c.yaml", "localhost", "9404", "/c.yaml"},
            {"127.0.0.1:1:c.yaml", "127.0.0.1", "1", "c.yaml"},
            {"[::1]:65535:/tmp/x/config.yaml", "::1", "65535", "/tmp/x/config.yaml"},
            {"  9404:/c.yaml  ", "", "9404", "/c.yaml"},
            // A relative file that merely contains env: further on is still a file.
            {"9404:./env:X", "", "9404", "./env:X"},
            {"9404:/config/env:X", "", "9404", "/config/env:X"},
        };
        for (String[] c : cases) {
            AgentArgs a = AgentArgs.parse(c[0]);
            assertEquals(c[0], c[1], a.host);
            assertEquals(c[0], Integer.parseInt(c[2]), a.port);
            assertEquals(c[0], c[3], a.configFile);
            assertNull(c[0], a.configEnv);
        }
    }

    @Test
    public void envFormNamesAVariableAndNoFile() {
        String[][] cases = {
            {"9404:env:HANDLERKIT_JMX_CONFIG", "", "9404", "HANDLERKIT_JMX_CONFIG"},
            {"0.0.0.0:9405:env:_x1", "0.0.0.0", "9405", "_x1"},
            {"[::]:9404:env:A", "::", "9404", "A"},
        };
        for (String[] c : cases) {
            AgentArgs a = AgentArgs.parse(c[0]);
            assertEquals(c[0], c[1], a.host);
            assertEquals(c[0], Integer.parseInt(c[2]), a.port);
            assertEquals(c[0], c[3], a.configEnv);
            assertNull(c[0], a.configFile);
        }
    }

    @Test
    public void malformedArgumentsAreRefused() {
        String[] cases = {
            null, "", "   ", "9404", "9404:", "host:9404", "abc:/c.yaml", "123456:/c.yaml",
            // env: with no name or a name no shell could export
            "9404:env:", "9404:env:1ABC", "9404:env:A-B", "9404:env:A B", "9404:env:A=B", "9404:env:$X",
        };
        for (String c : cases) {
            try {
                AgentArgs.parse(c);
                fail("parse(" + c + ") succeeded");
            } catch (AgentArgs.Invalid e) {
                fail("parse(" + c + ") is malformed, not Invalid: " + e.getMessage());
            } catch (IllegalArgumentException e) {
                assertTrue(e.getMessage(), e.getMessage().startsWith("Malformed arguments"));
            }
        }
    }

    @Test
    public void aPortOutOfRangeStillNamesTheConfigFileButNoEnvFile() {
        try {
            AgentArgs.parse("0:/tmp/dir/config.yaml");
            fail("port 0 accepted");
        } catch (AgentArgs.Invalid e) {
            assertEquals("/tmp/dir/config.yaml", e.configFile);
        }
        try {
            AgentArgs.parse("99999:env:HANDLERKIT_JMX_CONFIG");
            fail("port 99999 accepted");
        } catch (AgentArgs.Invalid e) {
            // No file: the refusal must not be written into the working directory.
            assertNull(e.configFile);
            assertTrue(e.getMessage(), e.getMessage().contains("99999"));
        }
    }

    @Test
    public void aVeryLongVariableNameIsRefused() {
        StringBuilder b = new StringBuilder("9404:env:");
        for (int i = 0; i < 256; i++) {
            b.append('A');
        }
        try {
            AgentArgs.parse(b.toString());
            fail("a 256-character name accepted");
        } catch (IllegalArgumentException e) {
            assertTrue(e.getMessage(), e.getMessage().startsWith("Malformed arguments"));
        }
    }
}
