package dev.handlerkit.jmxagent;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.Map;
import org.junit.Test;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import org.yaml.snakeyaml.constructor.SafeConstructor;

/** Parsed YAML measured and compared without walking its alias graphs. */
public class YamlGraphTest {

    private static Object parse(String yaml) {
        LoaderOptions opts = new LoaderOptions();
        opts.setMaxAliasesForCollections(50);
        return new Yaml(new SafeConstructor(opts)).load(yaml);
    }

    /** A graph of 48 aliases that stands for a tree of 3^16 (about 4.3e7) leaves, ending with leaf. */
    private static String graph(String leaf) {
        StringBuilder b = new StringBuilder("s: &s \"xxxxxxxxxxxxxxxx\"\nl0: &l0 [*s, *s, *s]\n");
        for (int i = 1; i <= 15; i++) {
            b.append("l").append(i).append(": &l").append(i).append(" [*l").append(i - 1).append(", *l")
                    .append(i - 1).append(", *l").append(i - 1).append("]\n");
        }
        return b.append("last: [*l15, *l15, *l15, ").append(leaf).append("]\n").toString();
    }

    @Test
    public void digestOfEqualValuesIsEqualWhateverTheMapOrder() {
        assertEquals(YamlGraph.digest(parse("{a: 1, b: [x, y], c: {d: true}}")),
                YamlGraph.digest(parse("{c: {d: true}, b: [x, y], a: 1}")));
        assertNotEquals(YamlGraph.digest(parse("{b: [x, y]}")), YamlGraph.digest(parse("{b: [y, x]}")));
        assertNotEquals(YamlGraph.digest(parse("{a: 1}")), YamlGraph.digest(parse("{a: '1'}")));
        assertNotEquals(YamlGraph.digest(parse("{a: [ab, c]}")), YamlGraph.digest(parse("{a: [a, bc]}")));
        assertNotEquals(YamlGraph.digest(null), YamlGraph.digest(parse("{}")));
    }

    @Test
    public void digestOfAnAliasGraphVisitsEachNodeOnce() {
        // Walked as a tree, each of these takes minutes; Objects.equals between them, longer.
        String a = YamlGraph.digest(parse(graph("a")));
        assertEquals(a, YamlGraph.digest(parse(graph("a"))));
        assertNotEquals(a, YamlGraph.digest(parse(graph("b"))));
    }

    @Test
    public void expandedSizeCountsEveryReferenceAndStopsAboveTheCap() {
        // The map, then key and value: a node and two characters each.
        assertEquals(1 + 3 + 3, YamlGraph.expandedSize(parse("{ab: cd}"), 100));
        // A shared string counts once per reference.
        assertEquals(1 + 3 * (1 + 3), YamlGraph.expandedSize(parse("[&s abc, *s, *s]"), 1000));
        Map<?, ?> g = (Map<?, ?>) parse(graph("a"));
        long n = YamlGraph.expandedSize(g.get("last"), 1000000);
        assertTrue("size " + n, n > 1000000 && n <= 1000001);
    }

    @Test
    public void aNodeThatContainsItselfIsRefused() {
        Object recursive = parse("&a [1, *a]");
        try {
            YamlGraph.digest(recursive);
            fail("digest of a recursive list");
        } catch (ConfigException e) {
            assertTrue(e.getMessage(), e.getMessage().contains("contains itself"));
        }
        try {
            YamlGraph.expandedSize(recursive, 1000);
            fail("size of a recursive list");
        } catch (ConfigException e) {
            assertTrue(e.getMessage(), e.getMessage().contains("contains itself"));
        }
    }
}
