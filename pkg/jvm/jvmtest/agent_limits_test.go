package jvmtest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The agent's limits on what its config names (docs/agent.md, "Limits"): the numbers the tests below check.
const (
	maxStoreBytes       = 4 << 20 // a key or trust store
	maxConfigBytes      = 4 << 20 // the config file
	maxPBKDF2Iterations = 2000000
	maxPBKDF2KeyBits    = 1024
)

// hangTimeout bounds the wait for a JVM whose agent might block: far above a normal start (about a second), so
// that only a block fails the test.
const hangTimeout = 45 * time.Second

// keyStore makes a PKCS12 key store with one key entry, alias "exporter", password "changeit".
func keyStore(t *testing.T, java string) string {
	t.Helper()
	keytool := filepath.Join(filepath.Dir(java), "keytool")
	ks := filepath.Join(t.TempDir(), "keystore.p12")
	out, err := exec.Command(keytool, "-genkeypair", "-alias", "exporter", "-keyalg", "EC", "-groupname", "secp256r1",
		"-dname", "CN=handlerkit-agent-test", "-validity", "2", "-storetype", "PKCS12", "-keystore", ks,
		"-storepass", "changeit", "-keypass", "changeit").CombinedOutput()
	if err != nil {
		t.Fatalf("keytool: %v\n%s", err, out)
	}
	return ks
}

func tlsConfig(keyStore, trustStore string) string {
	c := fmt.Sprintf("httpServer:\n  ssl:\n    keyStore:\n      filename: %s\n      type: PKCS12\n      password: changeit\n"+
		"    certificate:\n      alias: exporter\n", keyStore)
	if trustStore != "" {
		c += fmt.Sprintf("    mutualTLS: true\n    trustStore:\n      filename: %s\n      type: PKCS12\n"+
			"      password: changeit\n", trustStore)
	}
	return c + "rules:\n  - pattern: '.*'\n"
}

// mkfifo makes a FIFO that nobody writes: opening it for reading blocks until a writer comes.
func mkfifo(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Key and trust stores (and the config file itself) that are not regular files, or are larger than the limit,
// are refused with a reason that names what they are, without being opened: the application's main runs (the
// JVM prints its ready line), the JVM lives, and the refusal comes at once.
func TestAgentRefusesFilesThatAreNotRegularOrTooLarge(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	ks := keyStore(t, java)
	files := t.TempDir()
	fifo := mkfifo(t, files, "store.fifo")
	link := filepath.Join(files, "link-to-fifo.p12")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(files, "big.p12")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, maxStoreBytes+1); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, config, message string
	}{
		{"key store FIFO", tlsConfig(fifo, ""), "keyStore [" + fifo + "] is not a regular file: a FIFO"},
		{"key store symlink to FIFO", tlsConfig(link, ""), "keyStore [" + link + "] is not a regular file: a FIFO"},
		{"key store /dev/zero", tlsConfig("/dev/zero", ""), "is not a regular file: a character device"},
		{"key store /dev/urandom", tlsConfig("/dev/urandom", ""), "is not a regular file: a character device"},
		{"key store /proc/self/fd/1", tlsConfig("/proc/self/fd/1", ""), "keyStore [/proc/self/fd/1] is not a regular file"},
		{"key store directory", tlsConfig(files, ""), "is not a regular file: a directory"},
		{"key store too large", tlsConfig(big, ""), fmt.Sprintf("is %d bytes, more than the %d allowed", maxStoreBytes+1, maxStoreBytes)},
		{"trust store FIFO", tlsConfig(ks, fifo), "trustStore [" + fifo + "] is not a regular file: a FIFO"},
		{"trust store /dev/zero", tlsConfig(ks, "/dev/zero"), "trustStore [/dev/zero] is not a regular file: a character device"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			port := freePort(t)
			dir := t.TempDir()
			cfg := filepath.Join(dir, "config.yaml")
			if err := os.WriteFile(cfg, []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
			j := StartJVM(t, Options{App: testSampleApp(t), Java: java, ReadyTimeout: hangTimeout,
				JVMArgs: []string{fmt.Sprintf("-javaagent:%s=%d:%s", testAgentJar(t), port, cfg), "-Xmx64m"}})
			checkRefused(t, j, dir, tc.message)
		})
	}
	t.Run("config file FIFO", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		cfg := mkfifo(t, dir, "config.yaml")
		j := StartJVM(t, Options{App: testSampleApp(t), Java: java, ReadyTimeout: hangTimeout,
			JVMArgs: []string{fmt.Sprintf("-javaagent:%s=%d:%s", testAgentJar(t), freePort(t), cfg), "-Xmx64m"}})
		checkRefused(t, j, dir, "config file ["+cfg+"] is not a regular file: a FIFO")
	})
	t.Run("config file too large", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		cfg := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(cfg, []byte("rules:\n  - pattern: '.*'\n"+strings.Repeat("#", maxConfigBytes)), 0o644); err != nil {
			t.Fatal(err)
		}
		j := StartJVM(t, Options{App: testSampleApp(t), Java: java, ReadyTimeout: hangTimeout,
			JVMArgs: []string{fmt.Sprintf("-javaagent:%s=%d:%s", testAgentJar(t), freePort(t), cfg), "-Xmx64m"}})
		checkRefused(t, j, dir, fmt.Sprintf("more than the %d allowed", maxConfigBytes))
	})
}

// checkRefused checks that the agent in j refused with config-invalid and a message holding message, and that
// the JVM lives on.
func checkRefused(t *testing.T, j *JVM, dir, message string) {
	t.Helper()
	lines := waitAgentLines(t, j, 1)
	if want := AgentLinePrefix + "refused: config-invalid: "; len(lines) != 1 || !strings.HasPrefix(lines[0], want) ||
		!strings.Contains(lines[0], message) {
		t.Errorf("agent lines = %q, want one starting %q with %q", lines, want, message)
	}
	st, err := readStatus(t, dir)
	if err != nil {
		t.Fatalf("status: %v\nJVM output:\n%s", err, j.Output())
	}
	if st.State != "refused" || st.Reason != "config-invalid" || !strings.Contains(st.Message, message) {
		t.Errorf("status = %+v, want refused config-invalid with %q", st, message)
	}
	t.Logf("refused %s: %s", st.Reason, st.Message)
	time.Sleep(500 * time.Millisecond) // a deliberate pause, not a wait: the JVM must not die after the refusal
	if !j.Alive() {
		t.Fatalf("JVM died:\n%s", j.Output())
	}
}

// The attach listener (agentmain, the path jmx-attach takes) does not block on a FIFO either: jcmd returns and
// the agent's refusal names it, on every JDK here.
func TestAgentAttachRefusesAFIFOKeyStoreWithoutBlocking(t *testing.T) {
	for name, java := range agentJDKs(t) {
		t.Run(name, func(t *testing.T) {
			jcmd := filepath.Join(filepath.Dir(java), "jcmd")
			if _, err := os.Stat(jcmd); err != nil {
				t.Skip("no jcmd")
			}
			dir := t.TempDir()
			fifo := mkfifo(t, dir, "store.p12")
			config := filepath.Join(dir, "config.yaml")
			if err := os.WriteFile(config, []byte(tlsConfig(fifo, "")), 0o644); err != nil {
				t.Fatal(err)
			}
			j := StartJVM(t, Options{App: testSampleApp(t), Java: java})
			ctx, cancel := context.WithTimeout(context.Background(), hangTimeout)
			defer cancel()
			out, err := exec.CommandContext(ctx, jcmd, strconv.Itoa(j.Pid), "JVMTI.agent_load", testAgentJar(t),
				fmt.Sprintf("%d:%s", freePort(t), config)).CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("jcmd still waiting after %s: the attach listener is blocked\n%s", hangTimeout, j.Output())
			}
			if err != nil {
				t.Fatalf("jcmd: %v\n%s", err, out)
			}
			checkRefused(t, j, dir, "keyStore ["+fifo+"] is not a regular file: a FIFO")
		})
	}
}

// PBKDF2's cost is capped: more iterations than the cap, or a longer hash than the cap on its bits, is refused
// with a message naming the cap (a wrong password costs the application's CPU once per request).
func TestAgentCapsPBKDF2Work(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	auth := func(algorithm string, iterations, bits int) string {
		return "httpServer:\n  authentication:\n    basic:\n      username: prom\n      algorithm: " + algorithm +
			"\n      salt: pepper\n      iterations: " + strconv.Itoa(iterations) + "\n      keyLength: " +
			strconv.Itoa(bits) + "\n      passwordHash: " + strings.Repeat("ab", bits/8) + "\nrules:\n  - pattern: '.*'\n"
	}
	cases := []struct{ name, config, message string }{
		{"iterations above the cap", auth("PBKDF2WithHmacSHA1", maxPBKDF2Iterations+1, 128),
			fmt.Sprintf("/httpServer/authentication/basic/iterations must be at most %d", maxPBKDF2Iterations)},
		{"huge iterations", auth("PBKDF2WithHmacSHA256", 2147483647, 256),
			fmt.Sprintf("/httpServer/authentication/basic/iterations must be at most %d", maxPBKDF2Iterations)},
		{"hash longer than the cap", auth("PBKDF2WithHmacSHA512", 1000, maxPBKDF2KeyBits+8),
			fmt.Sprintf("/httpServer/authentication/basic/keyLength must be at most %d bits", maxPBKDF2KeyBits)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := startWithAgent(t, java, tc.config, freePort(t))
			checkRefused(t, j.JVM, j.dir, tc.message)
		})
	}
	// The cap is above every default: SHA1's 1,300,000 iterations are served.
	t.Run("the SHA1 default", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		j := startWithAgent(t, java, auth("PBKDF2WithHmacSHA1", 1300000, 128), port)
		if lines := waitAgentLines(t, j.JVM, 1); len(lines) != 1 || !strings.Contains(lines[0], "serving on") {
			t.Errorf("agent lines = %q", lines)
		}
	})
}

// aliasGraph is an httpServer section whose text is small (one 256 KiB string and 48 aliases, within the
// parser's limit of 50 aliases of collections) but whose tree, walked, has 3^16 (about 4.3e7) copies of the
// string: leaf is the last list's last element, so that two graphs may differ at their very end.
func aliasGraph(leaf string) string {
	var b strings.Builder
	b.WriteString("httpServer:\n  s: &s \"" + strings.Repeat("x", 256<<10) + "\"\n  l0: &l0 [*s, *s, *s]\n")
	for i := 1; i <= 15; i++ {
		fmt.Fprintf(&b, "  l%d: &l%d [*l%d, *l%d, *l%d]\n", i, i, i-1, i-1, i-1)
	}
	fmt.Fprintf(&b, "  last: [*l15, *l15, *l15, %q]\n", leaf)
	return b.String()
}

// A reload compares httpServer sections without walking their alias graphs: a reload of a config whose section
// is a graph of 10^8 nodes (the same as the running one, then a different one) is applied at once, the
// difference is reported, and scraping works throughout.
func TestAgentReloadDoesNotWalkAliasGraphs(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	rule := func(name string) string {
		return "rules:\n  - pattern: 'dev.handlerkit.sample<type=Counter><>Count'\n    name: " + name + "\n"
	}
	port := freePort(t)
	v1 := aliasGraph("a") + rule("first_name")
	j := startWithAgent(t, java, v1, port)
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	if _, body := get(t, http.DefaultClient, url, "", ""); !strings.Contains(body, "\nfirst_name ") {
		t.Fatalf("v1 not served:\n%.500s\n%s", body, j.Output())
	}

	// The same section, other rules: applied, and no restart is required.
	v2 := aliasGraph("a") + rule("second_name")
	writeConfig(t, j.config, v2)
	waitFor(t, "reload with the same alias graph", hangTimeout, func() (bool, string) {
		st, err := readStatus(t, j.dir)
		return err == nil && st.Reload != nil && st.Reload.ConfigSHA256 == sha256Hex([]byte(v2)),
			fmt.Sprintf("%+v %v", st, err)
	})
	st, _ := readStatus(t, j.dir)
	if !st.Reload.OK || st.ConfigSHA256 != sha256Hex([]byte(v2)) || st.RestartRequired != "" {
		t.Errorf("status after reload = %+v, want v2 applied with no restart required", st)
	}
	if _, body := get(t, http.DefaultClient, url, "", ""); !strings.Contains(body, "\nsecond_name ") {
		t.Fatalf("v2 not served:\n%.500s", body)
	}

	// A section that differs only in its last leaf: applied, and the change is reported.
	v3 := aliasGraph("b") + rule("third_name")
	writeConfig(t, j.config, v3)
	waitFor(t, "reload with another alias graph", hangTimeout, func() (bool, string) {
		st, err := readStatus(t, j.dir)
		return err == nil && st.Reload != nil && st.Reload.ConfigSHA256 == sha256Hex([]byte(v3)),
			fmt.Sprintf("%+v %v", st, err)
	})
	st, _ = readStatus(t, j.dir)
	if !st.Reload.OK || !strings.Contains(st.RestartRequired, "httpServer") {
		t.Errorf("status after reload = %+v, want v3 applied with the httpServer change reported", st)
	}
	if _, body := get(t, http.DefaultClient, url, "", ""); !strings.Contains(body, "\nthird_name ") {
		t.Fatalf("v3 not served:\n%.500s", body)
	}
	if !j.Alive() {
		t.Fatal("JVM died")
	}
}

// The collector walks what it reads (rules, object names) expanded, and aliases of strings are not limited by the
// parser: 20 000 references to a 1 MiB object name (a config of 1.1 MB) would have it parse 20 GB. Such a config
// is refused before the collector sees it, with a message naming the limit.
func TestAgentRefusesAliasGraphsTheCollectorWouldExpand(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	var b strings.Builder
	b.WriteString("s: &s \"java.lang:type=Memory,name=" + strings.Repeat("x", 1<<20) + "\"\nincludeObjectNames: [*s")
	b.WriteString(strings.Repeat(", *s", 20000-1))
	b.WriteString("]\nrules:\n  - pattern: '.*'\n")
	j := startWithAgent(t, java, b.String(), freePort(t))
	checkRefused(t, j.JVM, j.dir, "expands to more than 16777216 nodes and characters")
}

// A config file replaced by a FIFO is refused unopened by the reloader, reported once in the status, and the
// config in force is served on; a regular file put back is reloaded.
func TestAgentReloadRefusesAConfigFileReplacedByAFIFO(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	port := freePort(t)
	v1 := "rules:\n  - pattern: 'dev.handlerkit.sample<type=Counter><>Count'\n    name: first_name\n"
	j := startWithAgent(t, java, v1, port)
	fifo := mkfifo(t, t.TempDir(), "config.fifo")
	if err := os.Rename(fifo, j.config); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the FIFO's refusal in the status", hangTimeout, func() (bool, string) {
		st, err := readStatus(t, j.dir)
		return err == nil && st.Reload != nil && !st.Reload.OK &&
			strings.Contains(st.Reload.Message, "is not a regular file: a FIFO"), fmt.Sprintf("%+v %v", st, err)
	})
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	if _, body := get(t, http.DefaultClient, url, "", ""); !strings.Contains(body, "\nfirst_name ") {
		t.Fatalf("v1 not served after the refusal:\n%.500s", body)
	}
	v2 := strings.Replace(v1, "first_name", "second_name", 1)
	writeConfig(t, j.config, v2)
	waitFor(t, "reload of the regular file put back", hangTimeout, func() (bool, string) {
		st, err := readStatus(t, j.dir)
		return err == nil && st.Reload != nil && st.Reload.OK && st.ConfigSHA256 == sha256Hex([]byte(v2)),
			fmt.Sprintf("%+v %v", st, err)
	})
}
