package dev.handlerkit.jmxagent;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * YamlGraph measures and compares parsed YAML without walking it as a tree. YAML anchors and aliases make the
 * parsed document a graph whose nodes are shared: a few lines and fewer aliases than the parser's limit (50) can
 * stand for a tree of 10^8 nodes, and anything that walks the tree ({@code equals}, {@code hashCode},
 * {@code toString}) takes hours on it. Both functions here visit each distinct node once (memoized by identity),
 * so their cost follows the text, not the tree; a node that contains itself is refused.
 */
final class YamlGraph {

    private YamlGraph() {}

    /**
     * Returns the size of value as a tree, its nodes plus the characters of its strings, counting a node shared
     * through aliases once per reference; it stops counting above cap (and returns a number above cap).
     *
     * @throws ConfigException when value contains itself
     */
    static long expandedSize(Object value, long cap) {
        return expandedSize(value, cap, new IdentityHashMap<Object, Long>(), newIdentitySet());
    }

    private static long expandedSize(Object v, long cap, IdentityHashMap<Object, Long> memo, Set<Object> open) {
        if (!(v instanceof Map) && !(v instanceof Collection)) {
            return 1 + (v instanceof String ? ((String) v).length() : 0);
        }
        Long known = memo.get(v);
        if (known != null) {
            return known;
        }
        if (!open.add(v)) {
            throw new ConfigException("the config contains a node that contains itself (an alias inside its own"
                    + " anchor)");
        }
        long n = 1;
        for (Object child : children(v)) {
            n += expandedSize(child, cap, memo, open);
            if (n > cap) {
                break;
            }
        }
        open.remove(v);
        n = Math.min(n, cap + 1);
        memo.put(v, n);
        return n;
    }

    /**
     * Returns the hex SHA-256 of a canonical form of value: two values whose digests are equal are equal as
     * {@link java.util.Objects#equals} sees them (maps and sets whatever their order, lists in order, scalars by
     * type and text), up to SHA-256 collisions. Each distinct node is digested once.
     *
     * @throws ConfigException when value contains itself
     */
    static String digest(Object value) {
        return Agent.hex(digest(value, new IdentityHashMap<Object, byte[]>(), newIdentitySet()));
    }

    private static byte[] digest(Object v, IdentityHashMap<Object, byte[]> memo, Set<Object> open) {
        if (v == null) {
            return sha256("n".getBytes(StandardCharsets.UTF_8));
        }
        byte[] known = memo.get(v);
        if (known != null) {
            return known;
        }
        MessageDigest md = newSHA256();
        if (v instanceof Map || v instanceof Collection) {
            if (!open.add(v)) {
                throw new ConfigException("the config contains a node that contains itself (an alias inside its own"
                        + " anchor)");
            }
            List<byte[]> parts = new ArrayList<>();
            if (v instanceof Map) {
                for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                    MessageDigest pair = newSHA256();
                    pair.update(digest(e.getKey(), memo, open));
                    pair.update(digest(e.getValue(), memo, open));
                    parts.add(pair.digest());
                }
            } else {
                for (Object child : (Collection<?>) v) {
                    parts.add(digest(child, memo, open));
                }
            }
            open.remove(v);
            boolean ordered = v instanceof List;
            if (!ordered) {
                parts.sort(YamlGraph::compare);
            }
            md.update((byte) (v instanceof Map ? 'm' : ordered ? 'l' : 's'));
            for (byte[] p : parts) {
                md.update(p);
            }
        } else {
            byte[] text = v instanceof byte[]
                    ? (byte[]) v
                    : String.valueOf(v).getBytes(StandardCharsets.UTF_8);
            md.update(v.getClass().getName().getBytes(StandardCharsets.UTF_8));
            md.update((byte) 0);
            md.update(text);
        }
        byte[] d = md.digest();
        memo.put(v, d);
        return d;
    }

    private static Iterable<?> children(Object v) {
        if (v instanceof Map) {
            List<Object> out = new ArrayList<>();
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                out.add(e.getKey());
                out.add(e.getValue());
            }
            return out;
        }
        return (Collection<?>) v;
    }

    private static int compare(byte[] a, byte[] b) {
        for (int i = 0; i < Math.min(a.length, b.length); i++) {
            int c = (a[i] & 0xff) - (b[i] & 0xff);
            if (c != 0) {
                return c;
            }
        }
        return a.length - b.length;
    }

    private static Set<Object> newIdentitySet() {
        return java.util.Collections.newSetFromMap(new IdentityHashMap<Object, Boolean>());
    }

    private static MessageDigest newSHA256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static byte[] sha256(byte[] data) {
        return newSHA256().digest(data);
    }
}
