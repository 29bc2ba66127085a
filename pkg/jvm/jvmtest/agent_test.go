package jvmtest

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/pkg/testenv/freeport"
)

// The JDKs the agent tests run on: the machine's JDK 17 and the newest JDK (Temurin 25 here), each when present.
func agentJDKs(t *testing.T) map[string]string {
	t.Helper()
	jdks := map[string]string{}
	if _, err := os.Stat("/usr/lib/jvm/java-17-openjdk-amd64/bin/java"); err == nil {
		jdks["jdk17"] = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
	}
	if java, v := NewestJDK(21); java != "" {
		jdks["jdk"+strings.SplitN(v, ".", 2)[0]] = java
	}
	if len(jdks) == 0 {
		jdks["java"] = "java"
	}
	return jdks
}

var (
	agentOnce    sync.Once
	agentJarPath string
	agentJarErr  error
	sampleOnce   sync.Once
	sampleApp    App
	sampleErr    error
)

// testAgentJar builds (or finds cached) the project's agent once per test binary.
func testAgentJar(t *testing.T) string {
	t.Helper()
	agentOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		agentJarPath, agentJarErr = AgentJar(ctx)
	})
	if agentJarErr != nil {
		t.Fatal(agentJarErr)
	}
	return agentJarPath
}

func testSampleApp(t *testing.T) App {
	t.Helper()
	sampleOnce.Do(func() {
		dir, err := os.MkdirTemp("", "jvmtest-agent-app-")
		if err != nil {
			sampleErr = err
			return
		}
		sampleApp, sampleErr = BuildSampleApp(dir)
	})
	if sampleErr != nil {
		t.Fatal(sampleErr)
	}
	return sampleApp
}

// freePort returns a free loopback TCP port outside the ephemeral range and
// reserved against other test processes (freeport), so no outgoing
// connection or parallel test binary can take it before the agent binds it.
// (A port from "127.0.0.1:0" comes from the ephemeral range: on this busy
// machine an outgoing loopback connection could take it in between, and the
// agent refused with port-in-use.)
func freePort(t *testing.T) int {
	t.Helper()
	p, err := freeport.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// agentStatus is agent-status.json (docs/agent.md).
type agentStatus struct {
	Version         int    `json:"version"`
	Agent           string `json:"agent"`
	State           string `json:"state"`
	Reason          string `json:"reason"`
	Message         string `json:"message"`
	ConfigSHA256    string `json:"configSHA256"`
	Host            string `json:"host"`
	Port            int    `json:"port"`
	RestartRequired string `json:"restartRequired"`
	Reload          *struct {
		ConfigSHA256 string `json:"configSHA256"`
		OK           bool   `json:"ok"`
		Message      string `json:"message"`
	} `json:"reload"`
}

func readStatus(t *testing.T, dir string) (agentStatus, error) {
	t.Helper()
	var st agentStatus
	data, err := os.ReadFile(filepath.Join(dir, AgentStatusFile))
	if err != nil {
		return st, err
	}
	if len(data) > 16<<10 {
		t.Errorf("status file is %d bytes, more than 16 KiB", len(data))
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("%w: %s", err, data)
	}
	return st, nil
}

// waitFor polls cond until it returns true or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, detail := cond()
		if ok {
			return
		}
		last = detail
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s; last: %s", what, timeout, last)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// agentJVM is a sample application started with agents on its command line.
type agentJVM struct {
	*JVM
	dir    string // the config's directory, where the status file appears
	config string
	port   int
}

// startWithAgent writes config into a fresh directory and starts the sample application with the project's agent
// as -javaagent on port; extra JVM options come first.
func startWithAgent(t *testing.T, java, config string, port int, extra ...string) agentJVM {
	t.Helper()
	jar := testAgentJar(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{}, extra...), fmt.Sprintf("-javaagent:%s=%d:%s", jar, port, cfg), "-Xmx64m")
	j := StartJVM(t, Options{App: testSampleApp(t), Java: java, JVMArgs: args})
	return agentJVM{JVM: j, dir: dir, config: cfg, port: port}
}

// waitAgentLines waits until the JVM's output holds n agent lines (its stderr is copied apart from the stdout
// line StartJVM waits for) and returns them.
func waitAgentLines(t *testing.T, j *JVM, n int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lines := agentLines(j.Output())
		if len(lines) >= n || time.Now().After(deadline) {
			return lines
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// agentLines returns the agent's lines in the JVM's output.
func agentLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, AgentLinePrefix) {
			lines = append(lines, l)
		}
	}
	return lines
}

func get(t *testing.T, client *http.Client, url, user, password string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestAgentJarIsBuiltOnceAndPinnedByItsInputs(t *testing.T) {
	jar := testAgentJar(t)
	src, err := AgentSourceDir()
	if err != nil {
		t.Fatal(err)
	}
	sum, err := AgentInputsSHA256(src)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(filepath.Dir(jar)) != sum || filepath.Base(jar) != AgentJarFile {
		t.Errorf("jar at %s, want .../%s/%s", jar, sum, AgentJarFile)
	}
	zr, err := zip.OpenReader(jar)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var manifest string
	for _, f := range zr.File {
		if f.Name == "META-INF/MANIFEST.MF" {
			rc, _ := f.Open()
			b, _ := io.ReadAll(rc)
			rc.Close()
			manifest = string(b)
		}
		// Everything but the manifest lives in the agent's own package: the shaded libraries cannot clash with
		// the application's own.
		if !strings.HasPrefix(f.Name, "META-INF/") && !strings.HasPrefix(f.Name, "dev/handlerkit/jmxagent/") &&
			f.Name != "dev/" && f.Name != "dev/handlerkit/" {
			t.Errorf("jar entry %s outside dev/handlerkit/jmxagent", f.Name)
		}
		// Every class, the shaded libraries' too, loads into Java 8 (class file major version 52).
		if strings.HasSuffix(f.Name, ".class") {
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			head := make([]byte, 8)
			_, err = io.ReadFull(rc, head)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			if major := int(head[6])<<8 | int(head[7]); major > 52 {
				t.Errorf("%s has class file version %d, newer than Java 8's 52", f.Name, major)
			}
		}
	}
	for _, attr := range []string{"Agent-Class: " + AgentClass, "Premain-Class: " + AgentClass} {
		if !strings.Contains(manifest, attr) {
			t.Errorf("manifest lacks %q:\n%s", attr, manifest)
		}
	}
	start := time.Now()
	again, err := AgentJar(t.Context())
	if err != nil || again != jar {
		t.Fatalf("second AgentJar = %q, %v; want %q", again, err, jar)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cached AgentJar took %s", d)
	}
}

const formatConfig = `lowercaseOutputName: true
lowercaseOutputLabelNames: true
includeObjectNames: ["dev.handlerkit.sample:type=Counter", "java.lang:type=Memory"]
rules:
  - pattern: 'dev.handlerkit.sample<type=Counter><>Count'
    name: sample_requests_total
    type: COUNTER
    help: Requests seen by the sample app.
  - pattern: 'java.lang<type=Memory><HeapMemoryUsage>(\w+)'
    name: heap_$1_bytes
  - pattern: '.*'
`

func TestAgentServesJmxExporterFormat(t *testing.T) {
	for name, java := range agentJDKs(t) {
		t.Run(name, func(t *testing.T) {
			port := freePort(t)
			j := startWithAgent(t, java, formatConfig, port)
			url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
			code, body := get(t, http.DefaultClient, url, "", "")
			if code != http.StatusOK {
				t.Fatalf("GET /metrics: %d\n%s", code, body)
			}
			for _, want := range []string{
				"# HELP sample_requests_total Requests seen by the sample app.",
				"# TYPE sample_requests_total counter",
				"\nsample_requests_total ",
				"\nheap_used_bytes ",
				"\njava_lang_memory_objectpendingfinalizationcount ", // the catch-all rule, lowercased
				"\njvm_memory_used_bytes{area=\"heap\"} ",            // instrumentation-jvm, as jmx_exporter's agent
				"\njvm_threads_current ",
				"\njmx_scrape_error 0.0",
				"jmx_exporter_build_info{name=\"handlerkit-jmx-agent\",version=\"0.2.0\"} 1",
			} {
				if !strings.Contains(body, want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}
			// includeObjectNames keeps every other MBean out.
			for _, unwanted := range []string{"java_lang_threading", "dev_handlerkit_sample_gauge", "Java_Lang"} {
				if strings.Contains(body, unwanted) {
					t.Errorf("/metrics has %q, which includeObjectNames or lowercaseOutputName excludes", unwanted)
				}
			}
			st, err := readStatus(t, j.dir)
			if err != nil {
				t.Fatal(err)
			}
			if st.State != "serving" || st.Reason != "" || st.Port != port || st.Version != 1 ||
				st.ConfigSHA256 != sha256Hex([]byte(formatConfig)) || st.Reload != nil ||
				!strings.Contains(st.Agent, "jmx_exporter collector 1.6.0") {
				t.Errorf("status = %+v", st)
			}
			fi, err := os.Stat(filepath.Join(j.dir, AgentStatusFile))
			if err != nil || fi.Mode().Perm() != 0o644 {
				t.Errorf("status file mode: %v %v", fi.Mode(), err)
			}
			lines := waitAgentLines(t, j.JVM, 1)
			if len(lines) != 1 || !strings.HasPrefix(lines[0], AgentLinePrefix+"serving on :"+strconv.Itoa(port)+" (config sha256 ") {
				t.Errorf("agent lines = %q", lines)
			}
		})
	}
}

func TestAgentBasicAuthentication(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	salt := "pepper"
	hash := sha256Hex([]byte(salt + ":" + "s3cret"))
	for name, auth := range map[string]string{
		"plaintext": "      username: prom\n      password: s3cret\n",
		"sha-256":   "      username: prom\n      algorithm: SHA-256\n      salt: " + salt + "\n      passwordHash: " + hash + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			port := freePort(t)
			startWithAgent(t, java, "httpServer:\n  authentication:\n    basic:\n"+auth+"rules:\n  - pattern: '.*'\n", port)
			url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
			if code, _ := get(t, http.DefaultClient, url, "", ""); code != http.StatusUnauthorized {
				t.Errorf("no credentials: %d, want 401", code)
			}
			if code, _ := get(t, http.DefaultClient, url, "prom", "wrong"); code != http.StatusUnauthorized {
				t.Errorf("wrong password: %d, want 401", code)
			}
			code, body := get(t, http.DefaultClient, url, "prom", "s3cret")
			if code != http.StatusOK || !strings.Contains(body, "jvm_memory_used_bytes") {
				t.Errorf("right credentials: %d\n%.300s", code, body)
			}
		})
	}
}

func TestAgentServesTLSFromAKeyStore(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	keytool := filepath.Join(filepath.Dir(java), "keytool")
	ks := filepath.Join(t.TempDir(), "keystore.p12")
	out, err := exec.Command(keytool, "-genkeypair", "-alias", "exporter", "-keyalg", "RSA", "-keysize", "2048",
		"-dname", "CN=handlerkit-agent-test", "-validity", "2", "-storetype", "PKCS12", "-keystore", ks,
		"-storepass", "changeit", "-keypass", "changeit").CombinedOutput()
	if err != nil {
		t.Fatalf("keytool: %v\n%s", err, out)
	}
	port := freePort(t)
	config := fmt.Sprintf(`httpServer:
  ssl:
    keyStore:
      filename: %s
      type: PKCS12
      password: changeit
    certificate:
      alias: exporter
rules:
  - pattern: '.*'
`, ks)
	startWithAgent(t, java, config, port)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "jvm_memory_used_bytes") {
		t.Fatalf("GET https /metrics: %d\n%.300s", resp.StatusCode, body)
	}
	if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; cn != "handlerkit-agent-test" {
		t.Errorf("certificate CN %q, want the keystore alias's", cn)
	}
	if resp.Header.Get("Strict-Transport-Security") == "" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("security headers missing: %v", resp.Header)
	}
	// Plain HTTP on the TLS port is not served.
	if r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)); err == nil {
		r.Body.Close()
		if r.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP served on the TLS port")
		}
	}
}

// yamlBomb is a billion-laughs document: a few lines that expand to 10^9 nodes without alias limits.
const yamlBomb = `a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
`

// The configs that end a JVM running jmx_exporter's own agent leave this one alive, refused with the collector's
// or the parser's own message.
func TestAgentRefusesBadConfigsAndTheJVMLives(t *testing.T) {
	cases := []struct {
		name, config, reason, message string
		busyPort                      bool
		port                          int // the argument's port, when not a free one
	}{
		{name: "port out of range", config: "rules:\n  - pattern: '.*'\n", port: 70000,
			reason: "config-invalid", message: "Port must be between 1 and 65535 [70000]"},
		{name: "unclosed group", config: "rules:\n  - pattern: 'java.lang<type=(Memory>'\n",
			reason: "config-invalid", message: "Unclosed group"},
		{name: "go named group", config: "rules:\n  - pattern: 'java.lang<type=(?P<t>\\w+)>'\n",
			reason: "config-invalid", message: "(?P"},
		{name: "object name without key", config: "includeObjectNames: [\"java.lang\"]\nrules:\n  - pattern: '.*'\n",
			reason: "config-invalid", message: "Key properties cannot be empty"},
		{name: "basic auth without password",
			config: "httpServer:\n  authentication:\n    basic:\n      username: prom\nrules:\n  - pattern: '.*'\n",
			reason: "config-invalid", message: "/httpServer/authentication/basic/password is a required string"},
		{name: "not yaml", config: "rules: [\n", reason: "config-invalid", message: ""},
		{name: "exclude with trailing comma", config: "excludeObjectNames: [\"java.lang:type=Memory,\"]\n",
			reason: "config-invalid", message: ""},
		{name: "agent mode with jmxUrl", config: "jmxUrl: service:jmx:rmi:///jndi/rmi://127.0.0.1:1/jmxrmi\n",
			reason: "config-invalid", message: "jmxUrl"},
		{name: "yaml bomb", config: yamlBomb, reason: "config-invalid", message: "aliases"},
		{name: "not a map", config: "- rules\n- pattern\n", reason: "config-invalid", message: ""},
		{name: "invalid utf-8", config: "rules:\n  - pattern: \"\xff\xfe\"\n", reason: "config-invalid", message: "not valid UTF-8"},
		{name: "unsupported hash algorithm",
			config: "httpServer:\n  authentication:\n    basic:\n      username: u\n      algorithm: MD5\n      passwordHash: aa\n",
			reason: "config-invalid", message: "Unsupported /httpServer/authentication/basic/algorithm [MD5]"},
		{name: "hash without salt",
			config: "httpServer:\n  authentication:\n    basic:\n      username: u\n      algorithm: SHA-256\n      passwordHash: aa\n",
			reason: "config-invalid", message: "/httpServer/authentication/basic/salt is a required string"},
		{name: "missing key store",
			config: "httpServer:\n  ssl:\n    keyStore:\n      filename: /nonexistent.p12\n      password: x\n    certificate:\n      alias: a\n",
			reason: "config-invalid", message: "/nonexistent.p12"},
		{name: "threads maximum below minimum",
			config: "httpServer:\n  threads:\n    minimum: 5\n    maximum: 2\n    keepAliveTime: 10\n",
			reason: "config-invalid", message: "/httpServer/threads/maximum"},
		{name: "huge message", config: "rules:\n  - pattern: '(" + strings.Repeat("java.lang", 4000) + "'\n",
			reason: "config-invalid", message: "Unclosed group"},
		{name: "openTelemetry", config: "openTelemetry:\n  endpoint: http://127.0.0.1:4317\n",
			reason: "config-invalid", message: "/openTelemetry is not supported"},
		{name: "port in use", config: "rules:\n  - pattern: '.*'\n", busyPort: true,
			reason: "port-in-use", message: "Address already in use"},
	}
	for jdk, java := range agentJDKs(t) {
		for _, tc := range cases {
			t.Run(jdk+"/"+tc.name, func(t *testing.T) {
				// Each case has its own JVM, port and directory: they run
				// side by side (at most -parallel, GOMAXPROCS by default), so
				// that the half second each waits below overlaps.
				t.Parallel()
				port := freePort(t)
				if tc.port != 0 {
					port = tc.port
				}
				if tc.busyPort {
					l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
					if err != nil {
						t.Fatal(err)
					}
					defer l.Close()
				}
				j := startWithAgent(t, java, tc.config, port)
				st, err := readStatus(t, j.dir)
				if err != nil {
					t.Fatalf("status: %v\nJVM output:\n%s", err, j.Output())
				}
				if st.State != "refused" || st.Reason != tc.reason || !strings.Contains(st.Message, tc.message) ||
					st.Message == "" {
					t.Errorf("status = %+v, want refused %s with %q", st, tc.reason, tc.message)
				}
				t.Logf("refused %s: %s", st.Reason, st.Message)
				if want := sha256Hex([]byte(tc.config)); st.ConfigSHA256 != want && tc.port == 0 {
					t.Errorf("configSHA256 = %q, want the attempted config's", st.ConfigSHA256)
				}
				lines := waitAgentLines(t, j.JVM, 1)
				if want := AgentLinePrefix + "refused: " + tc.reason + ": "; len(lines) != 1 || !strings.HasPrefix(lines[0], want) {
					t.Errorf("agent lines = %q, want one starting %q", lines, want)
				}
				// The application runs on: its MBean counter keeps the JVM busy; give it a moment to die if
				// it were going to. A deliberate pause, not a wait: it proves that nothing happens.
				time.Sleep(500 * time.Millisecond)
				if !j.Alive() {
					t.Fatalf("JVM died:\n%s", j.Output())
				}
			})
		}
	}
}

func TestAgentReloadAppliesValidAndKeepsOldOnInvalid(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	port := freePort(t)
	v1 := "rules:\n  - pattern: 'dev.handlerkit.sample<type=Counter><>Count'\n    name: first_name\n"
	j := startWithAgent(t, java, v1, port)
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	if _, body := get(t, http.DefaultClient, url, "", ""); !strings.Contains(body, "\nfirst_name ") {
		t.Fatalf("v1 not served:\n%.500s", body)
	}

	v2 := "rules:\n  - pattern: 'dev.handlerkit.sample<type=Counter><>Count'\n    name: second_name\n"
	writeConfig(t, j.config, v2)
	waitFor(t, "valid reload", 30*time.Second, func() (bool, string) {
		st, err := readStatus(t, j.dir)
		return err == nil && st.ConfigSHA256 == sha256Hex([]byte(v2)) && st.Reload != nil && st.Reload.OK,
			fmt.Sprintf("%+v %v", st, err)
	})
	if _, body := get(t, http.DefaultClient, url, "", ""); !strings.Contains(body, "\nsecond_name ") ||
		strings.Contains(body, "first_name") {
		t.Fatalf("v2 not served after reload:\n%.500s", body)
	}

	bad := "rules:\n  - pattern: 'java.lang<type=(Memory>'\n    name: third_name\n"
	writeConfig(t, j.config, bad)
	waitFor(t, "invalid reload reported", 30*time.Second, func() (bool, string) {
		st, err := readStatus(t, j.dir)
		return err == nil && st.Reload != nil && st.Reload.ConfigSHA256 == sha256Hex([]byte(bad)),
			fmt.Sprintf("%+v %v", st, err)
	})
	st, _ := readStatus(t, j.dir)
	if st.State != "serving" || st.Reload.OK || !strings.Contains(st.Reload.Message, "Unclosed group") ||
		st.ConfigSHA256 != sha256Hex([]byte(v2)) {
		t.Errorf("status after invalid reload = %+v", st)
	}
	if _, body := get(t, http.DefaultClient, url, "", ""); !strings.Contains(body, "\nsecond_name ") {
		t.Fatalf("old config not kept after invalid reload:\n%.500s", body)
	}

	// Rules the collector accepts, with an httpServer section the agent rejects: nothing of it applies, not even
	// through the collector's own reload of a changed file.
	badHTTP := "httpServer:\n  authentication:\n    basic:\n      username: prom\n" +
		"rules:\n  - pattern: 'dev.handlerkit.sample<type=Counter><>Count'\n    name: fourth_name\n"
	writeConfig(t, j.config, badHTTP)
	waitFor(t, "invalid httpServer reload reported", 30*time.Second, func() (bool, string) {
		st, err := readStatus(t, j.dir)
		return err == nil && st.Reload != nil && st.Reload.ConfigSHA256 == sha256Hex([]byte(badHTTP)),
			fmt.Sprintf("%+v %v", st, err)
	})
	if st, _ := readStatus(t, j.dir); st.Reload.OK || !strings.Contains(st.Reload.Message, "password is a required string") {
		t.Errorf("status after invalid httpServer reload = %+v", st)
	}
	// A deliberate pause between scrapes, not a wait: it proves over more than a second that the rejected
	// config is never served.
	for i := 0; i < 3; i++ {
		time.Sleep(400 * time.Millisecond)
		if _, body := get(t, http.DefaultClient, url, "", ""); strings.Contains(body, "fourth_name") ||
			!strings.Contains(body, "\nsecond_name ") {
			t.Fatalf("a rejected config is served:\n%.500s", body)
		}
	}

	v3 := "httpServer:\n  threads:\n    minimum: 1\n    maximum: 2\n    keepAliveTime: 30\n" + v2
	writeConfig(t, j.config, v3)
	waitFor(t, "httpServer change reported", 30*time.Second, func() (bool, string) {
		st, err := readStatus(t, j.dir)
		return err == nil && st.ConfigSHA256 == sha256Hex([]byte(v3)) && strings.Contains(st.RestartRequired, "httpServer"),
			fmt.Sprintf("%+v %v", st, err)
	})
	if lines := waitAgentLines(t, j.JVM, 1); len(lines) != 1 {
		t.Errorf("agent lines = %q, want the start's only", lines)
	}
	if !j.Alive() {
		t.Fatal("JVM died")
	}
}

// writeConfig replaces the config the way jmx-attach does: a new file renamed over the old.
func writeConfig(t *testing.T, path, config string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// The Prometheus client library reads -Dprometheus.config and PROMETHEUS_CONFIG; inside the agent it must not,
// or an application's setting (here a missing file) would break the agent.
func TestAgentIgnoresTheApplicationsPrometheusConfig(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	t.Setenv("PROMETHEUS_CONFIG", "/nonexistent/prometheus.properties")
	port := freePort(t)
	j := startWithAgent(t, java, formatConfig, port, "-Dprometheus.config=/nonexistent/prometheus.properties",
		"-Dio.prometheus.exporter.includeCreatedTimestamps=not-a-boolean")
	st, err := readStatus(t, j.dir)
	if err != nil || st.State != "serving" {
		t.Fatalf("status = %+v, %v\n%s", st, err, j.Output())
	}
	code, body := get(t, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), "", "")
	if code != http.StatusOK || !strings.Contains(body, "jvm_memory_used_bytes") || !strings.Contains(body, "sample_requests_total") {
		t.Fatalf("GET /metrics: %d\n%.500s", code, body)
	}
}

// A JVM that runs jmx_exporter's own agent (1.0.1) as -javaagent, and gets ours too: ours refuses and the JVM
// lives, still served by the upstream agent.
func TestAgentRefusesWhenJmxExporterIsAlreadyPresent(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	upstream, err := JMXExporterJar(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	upDir := t.TempDir()
	upConfig := filepath.Join(upDir, "upstream.yaml")
	if err := os.WriteFile(upConfig, []byte("rules:\n  - pattern: '.*'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	upPort, port := freePort(t), freePort(t)
	j := startWithAgent(t, java, formatConfig, port, fmt.Sprintf("-javaagent:%s=%d:%s", upstream, upPort, upConfig))
	st, err := readStatus(t, j.dir)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, j.Output())
	}
	if st.State != "refused" || st.Reason != "agent-already-present" || !strings.Contains(st.Message, "jmx_prometheus_javaagent") {
		t.Errorf("status = %+v", st)
	}
	if code, _ := get(t, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/metrics", upPort), "", ""); code != http.StatusOK {
		t.Errorf("upstream agent not serving: %d", code)
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
		c.Close()
		t.Errorf("our agent listens on %d after refusing", port)
	}
	time.Sleep(500 * time.Millisecond) // a deliberate pause, not a wait: the JVM must not die after the refusal
	if !j.Alive() {
		t.Fatalf("JVM died:\n%s", j.Output())
	}
}

// Our agent twice on one command line: the second load refuses, the first keeps serving, and the status file of
// the first is not overwritten.
func TestAgentRefusesASecondLoadOfItself(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	jar := testAgentJar(t)
	second := t.TempDir()
	secondConfig := filepath.Join(second, "config.yaml")
	if err := os.WriteFile(secondConfig, []byte(formatConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	port, port2 := freePort(t), freePort(t)
	// -javaagent options run in order: ours (port) first, then ours again (port2).
	j := StartJVM(t, Options{App: testSampleApp(t), Java: java, JVMArgs: []string{
		fmt.Sprintf("-javaagent:%s=%d:%s", jar, port, writeTemp(t, formatConfig)),
		fmt.Sprintf("-javaagent:%s=%d:%s", jar, port2, secondConfig),
	}})
	st, err := readStatus(t, second)
	if err != nil || st.State != "refused" || st.Reason != "agent-already-present" {
		t.Fatalf("second status = %+v, %v\n%s", st, err, j.Output())
	}
	if lines := waitAgentLines(t, j, 2); len(lines) != 2 || !strings.Contains(lines[0], "serving") ||
		!strings.Contains(lines[1], "refused: agent-already-present") {
		t.Errorf("agent lines = %q", lines)
	}
	if code, _ := get(t, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), "", ""); code != http.StatusOK {
		t.Errorf("first agent not serving: %d", code)
	}
}

func writeTemp(t *testing.T, config string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// jmx_exporter loaded at run time from a renamed jar leaves no trace on the command line or in the environment:
// its loaded classes give it away. (Dynamic loading here goes through jcmd; jmx-attach's own tests cover
// loading through jmx-attach.)
func TestAgentRefusesWhenJmxExporterClassesAreLoaded(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	jcmd := filepath.Join(filepath.Dir(java), "jcmd")
	upstream, err := JMXExporterJar(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	renamed := filepath.Join(dir, "exporter.jar")
	data, err := os.ReadFile(upstream)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(renamed, data, 0o644); err != nil {
		t.Fatal(err)
	}
	upConfig := writeTemp(t, "rules:\n  - pattern: '.*'\n")
	ourConfig := writeTemp(t, formatConfig)
	upPort, port := freePort(t), freePort(t)
	j := StartJVM(t, Options{App: testSampleApp(t), Java: java})
	load := func(jar, arg string) {
		t.Helper()
		out, err := exec.Command(jcmd, strconv.Itoa(j.Pid), "JVMTI.agent_load", jar, arg).CombinedOutput()
		if err != nil {
			t.Fatalf("jcmd JVMTI.agent_load %s: %v\n%s", jar, err, out)
		}
	}
	load(renamed, fmt.Sprintf("%d:%s", upPort, upConfig))
	load(testAgentJar(t), fmt.Sprintf("%d:%s", port, ourConfig))
	st, err := readStatus(t, filepath.Dir(ourConfig))
	if err != nil {
		t.Fatalf("status: %v\n%s", err, j.Output())
	}
	if st.State != "refused" || st.Reason != "agent-already-present" || !strings.Contains(st.Message, "io.prometheus.jmx.") {
		t.Errorf("status = %+v", st)
	}
	if code, _ := get(t, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/metrics", upPort), "", ""); code != http.StatusOK {
		t.Errorf("upstream agent not serving: %d", code)
	}
	if !j.Alive() {
		t.Fatalf("JVM died:\n%s", j.Output())
	}
}

// JAVA_TOOL_OPTIONS naming jmx_exporter's agent counts as jmx_exporter present, whatever the order of the agents.
func TestAgentRefusesWhenJavaToolOptionsNameJmxExporter(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	upstream, err := JMXExporterJar(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	upPort, port := freePort(t), freePort(t)
	t.Setenv("JAVA_TOOL_OPTIONS", fmt.Sprintf("-javaagent:%s=%d:%s", upstream, upPort, writeTemp(t, "rules:\n  - pattern: '.*'\n")))
	j := startWithAgent(t, java, formatConfig, port)
	st, err := readStatus(t, j.dir)
	if err != nil || st.State != "refused" || st.Reason != "agent-already-present" {
		t.Fatalf("status = %+v, %v\n%s", st, err, j.Output())
	}
	if !j.Alive() {
		t.Fatalf("JVM died:\n%s", j.Output())
	}
}

// PBKDF2-hashed passwords, as jmx_exporter documents them: hex of PBKDF2 over the UTF-8 salt.
func TestAgentBasicAuthenticationWithPBKDF2(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	// PBKDF2WithHmacSHA256("s3cret", salt "pepper", 1000 iterations, 128 bits), computed by the JDK below.
	hash := pbkdf2Hex(t, java, "s3cret", "pepper", 1000, 128)
	port := freePort(t)
	startWithAgent(t, java, "httpServer:\n  authentication:\n    basic:\n      username: prom\n"+
		"      algorithm: PBKDF2WithHmacSHA256\n      salt: pepper\n      iterations: 1000\n      keyLength: 128\n"+
		"      passwordHash: "+hash+"\nrules:\n  - pattern: '.*'\n", port)
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	if code, _ := get(t, http.DefaultClient, url, "prom", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong password: %d, want 401", code)
	}
	if code, _ := get(t, http.DefaultClient, url, "prom", "s3cret"); code != http.StatusOK {
		t.Errorf("right password: %d, want 200", code)
	}
}

// pbkdf2Hex computes a PBKDF2WithHmacSHA256 hash with the JDK itself (jshell-free: a one-file java program).
func pbkdf2Hex(t *testing.T, java, password, salt string, iterations, bits int) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "Hash.java")
	prog := `public class Hash { public static void main(String[] a) throws Exception {
  javax.crypto.spec.PBEKeySpec s = new javax.crypto.spec.PBEKeySpec(a[0].toCharArray(),
      a[1].getBytes("UTF-8"), Integer.parseInt(a[2]), Integer.parseInt(a[3]));
  byte[] h = javax.crypto.SecretKeyFactory.getInstance("PBKDF2WithHmacSHA256").generateSecret(s).getEncoded();
  StringBuilder b = new StringBuilder(); for (byte x : h) b.append(String.format("%02x", x));
  System.out.println(b); } }`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(java, src, password, salt, strconv.Itoa(iterations), strconv.Itoa(bits)).Output()
	if err != nil {
		t.Fatalf("hash: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// The same config served by jmx_exporter's own agent (1.0.1) and by this agent gives the same series: names, label
// names and TYPE lines (values differ, and build info names the agent).
func TestAgentSeriesMatchJmxExporter(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	upstream, err := JMXExporterJar(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	upPort, port := freePort(t), freePort(t)
	up := StartJVM(t, Options{App: testSampleApp(t), Java: java, JVMArgs: []string{"-Xmx64m",
		fmt.Sprintf("-javaagent:%s=%d:%s", upstream, upPort, writeTemp(t, formatConfig))}})
	ours := startWithAgent(t, java, formatConfig, port)
	// jvm_memory_pool_allocated_bytes_total appears only after the JVM's
	// first garbage collection (the collector counts on GC notifications),
	// which a young sample app may or may not have had: run one in each JVM.
	for _, pid := range []int{up.Pid, ours.Pid} {
		if out, err := exec.Command(filepath.Join(filepath.Dir(java), "jcmd"), strconv.Itoa(pid), "GC.run").CombinedOutput(); err != nil {
			t.Fatalf("jcmd %d GC.run: %v\n%s", pid, err, out)
		}
	}
	shape := func(port int) []string {
		_, body := get(t, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), "", "")
		seen := map[string]bool{}
		for _, line := range strings.Split(body, "\n") {
			switch {
			case line == "" || strings.HasPrefix(line, "# HELP"):
				continue
			case strings.HasPrefix(line, "# TYPE"):
				seen[line] = true
			default:
				series := line[:strings.LastIndex(line, " ")]
				seen[labelValues.ReplaceAllString(series, `=""`)] = true
			}
		}
		var out []string
		for k := range seen {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	// The GC notification reaches the collectors asynchronously: scrape
	// until both agents show the same shape, or a generous deadline.
	want, got := shape(upPort), shape(port)
	for deadline := time.Now().Add(30 * time.Second); strings.Join(want, "\n") != strings.Join(got, "\n") && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		want, got = shape(upPort), shape(port)
	}
	if strings.Join(want, "\n") != strings.Join(got, "\n") {
		t.Errorf("series differ from jmx_exporter 1.0.1's\nupstream:\n%s\n\nthis agent:\n%s", strings.Join(want, "\n"),
			strings.Join(got, "\n"))
	}
	if len(got) < 20 {
		t.Errorf("only %d series and types", len(got))
	}
}

var labelValues = regexp.MustCompile(`="(?:[^"\\]|\\.)*"`)

// A JVM without the right to bind a privileged port: port-not-permitted, and the JVM lives.
func TestAgentRefusesAPortItMayNotBind(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a JVM as another user")
	}
	// A privileged port that is free (binding it as root proves that).
	port := 0
	for p := 900; p < 1000 && port == 0; p++ {
		if l, err := net.Listen("tcp", fmt.Sprintf(":%d", p)); err == nil {
			l.Close()
			port = p
		}
	}
	if port == 0 {
		t.Skip("no free port below 1024")
	}
	// Everything the JVM reads or writes must be reachable by nobody.
	dir, err := os.MkdirTemp("", "jvmtest-agent-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(testAgentJar(t))
	if err != nil {
		t.Fatal(err)
	}
	jar := filepath.Join(dir, AgentJarFile)
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(jar, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, []byte("rules:\n  - pattern: '.*'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := StartJVM(t, Options{App: testSampleApp(t), Java: java, Credential: &syscall.Credential{Uid: 65534, Gid: 65534},
		JVMArgs: []string{fmt.Sprintf("-javaagent:%s=%d:%s", jar, port, config)}})
	st, err := readStatus(t, dir)
	if err != nil || st.State != "refused" || st.Reason != "port-not-permitted" {
		t.Fatalf("status = %+v, %v\n%s", st, err, j.Output())
	}
	t.Logf("refused %s: %s", st.Reason, st.Message)
	if !j.Alive() {
		t.Fatalf("JVM died:\n%s", j.Output())
	}
}

// agentmain, the entry point jmx-attach uses, on every JDK here: loaded at run time with jcmd, it serves.
func TestAgentLoadsAtRunTime(t *testing.T) {
	for name, java := range agentJDKs(t) {
		t.Run(name, func(t *testing.T) {
			jcmd := filepath.Join(filepath.Dir(java), "jcmd")
			if _, err := os.Stat(jcmd); err != nil {
				t.Skip("no jcmd")
			}
			config := writeTemp(t, formatConfig)
			port := freePort(t)
			j := StartJVM(t, Options{App: testSampleApp(t), Java: java})
			out, err := exec.Command(jcmd, strconv.Itoa(j.Pid), "JVMTI.agent_load", testAgentJar(t),
				fmt.Sprintf("%d:%s", port, config)).CombinedOutput()
			if err != nil {
				t.Fatalf("jcmd: %v\n%s", err, out)
			}
			st, err := readStatus(t, filepath.Dir(config))
			if err != nil || st.State != "serving" {
				t.Fatalf("status = %+v, %v\n%s", st, err, j.Output())
			}
			if code, body := get(t, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), "", ""); code != http.StatusOK ||
				!strings.Contains(body, "sample_requests_total") {
				t.Errorf("GET /metrics: %d\n%.300s", code, body)
			}
			if lines := waitAgentLines(t, j, 1); len(lines) != 1 || !strings.Contains(lines[0], "serving on") {
				t.Errorf("agent lines = %q", lines)
			}
		})
	}
}

// A runtime trimmed with jlink and without jdk.httpserver (common in small images): jvm-unsupported, JVM alive.
func TestAgentRefusesARuntimeWithoutTheHTTPServerModule(t *testing.T) {
	java := agentJDKs(t)["jdk17"]
	if java == "" {
		t.Skip("no JDK 17")
	}
	home := filepath.Dir(filepath.Dir(java))
	jlink := filepath.Join(home, "bin", "jlink")
	if _, err := os.Stat(filepath.Join(home, "jmods", "java.base.jmod")); err != nil {
		t.Skip("no jmods to link a runtime from")
	}
	rt := filepath.Join(t.TempDir(), "rt")
	out, err := exec.Command(jlink, "--add-modules", "java.base,java.management,java.instrument,java.logging",
		"--no-header-files", "--no-man-pages", "--output", rt).CombinedOutput()
	if err != nil {
		t.Fatalf("jlink: %v\n%s", err, out)
	}
	port := freePort(t)
	j := startWithAgent(t, filepath.Join(rt, "bin", "java"), formatConfig, port)
	st, err := readStatus(t, j.dir)
	if err != nil || st.State != "refused" || st.Reason != "jvm-unsupported" || !strings.Contains(st.Message, "jdk.httpserver") {
		t.Fatalf("status = %+v, %v\n%s", st, err, j.Output())
	}
	time.Sleep(500 * time.Millisecond) // a deliberate pause, not a wait: the JVM must not die after the refusal
	if !j.Alive() {
		t.Fatalf("JVM died:\n%s", j.Output())
	}
}
