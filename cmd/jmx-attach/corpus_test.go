package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// corpusCase is one bad or unsupported exporter config, and the reasons jmx-attach may give it.
type corpusCase struct {
	name string
	// config returns the config's bytes; dir is a directory for files it names (a key store).
	config func(t *testing.T, dir string) []byte
	// want are the acceptable reasons.
	want []jvm.Reason
	// busyPort injects on a port a listener holds.
	busyPort bool
}

// keyStore makes a PKCS12 key store with password "secret" and a key aliased "localhost" in dir, with the
// keytool of the JDK on PATH.
func keyStore(t *testing.T, dir string) string {
	t.Helper()
	ks := filepath.Join(dir, "keystore.p12")
	if _, err := os.Stat(ks); err == nil {
		return ks
	}
	out, err := exec.Command("keytool", "-genkeypair", "-keystore", ks, "-storetype", "PKCS12", "-storepass", "secret",
		"-alias", "localhost", "-keyalg", "RSA", "-keysize", "2048", "-dname", "CN=localhost", "-validity", "2").CombinedOutput()
	if err != nil {
		t.Fatalf("keytool: %v: %s", err, out)
	}
	if err := os.Chmod(ks, 0o644); err != nil {
		t.Fatal(err)
	}
	return ks
}

// corpus is the set of bad and unsupported configs: jvmtest.Corpus (the four of issue 22 that killed JVMs
// through jmx_exporter 1.0.1, and regular expression, ObjectName, value type, agent mode, authentication, TLS,
// size, YAML bomb, encoding and unsupported-section cases), which test/e2e also runs through the operator, and
// two cases of jmx-attach's own that need more than a config: a key store with the wrong password (a file on
// the JVM's host) and a busy port.
var corpus = func() []corpusCase {
	var out []corpusCase
	for _, c := range jvmtest.Corpus() {
		want := make([]jvm.Reason, len(c.Reasons))
		for i, r := range c.Reasons {
			want[i] = jvm.Reason(r)
		}
		config := c.Config
		out = append(out, corpusCase{name: c.Name, config: func(*testing.T, string) []byte { return config }, want: want})
	}
	return append(out,
		corpusCase{name: "wrong key store password", config: func(t *testing.T, dir string) []byte {
			return []byte("httpServer:\n  ssl:\n    keyStore:\n      filename: " + keyStore(t, dir) + "\n      password: wrong\n    certificate:\n      alias: localhost\n")
		}, want: []jvm.Reason{jvm.ReasonConfigInvalid}},
		corpusCase{name: "port in use", config: func(*testing.T, string) []byte { return []byte("rules:\n- pattern: \".*\"\n") },
			want: []jvm.Reason{jvm.ReasonPortInUse}, busyPort: true})
}()

// buildReadyApp compiles testdata/readyapp into dir and returns it as a jvmtest.App.
func buildReadyApp(t *testing.T, dir string) jvmtest.App {
	t.Helper()
	src, err := filepath.Abs("testdata/readyapp/ReadyApp.java")
	if err != nil {
		t.Fatal(err)
	}
	classes := filepath.Join(dir, "classes")
	if out, err := exec.Command("javac", "-d", classes, src).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v: %s", err, out)
	}
	jar := filepath.Join(dir, "ready-app.jar")
	if err := jvmtest.WriteJar(jar, classes, map[string]string{"Main-Class": "ReadyApp"}); err != nil {
		t.Fatal(err)
	}
	return jvmtest.App{Jar: jar, ClassesDir: classes, MainClass: "ReadyApp"}
}

// readyJVM is a ReadyApp JVM and its own readiness port.
type readyJVM struct {
	*jvmtest.JVM
	readyPort int
}

func startReadyJVM(t *testing.T, app jvmtest.App, java string, opts jvmtest.Options) readyJVM {
	t.Helper()
	port := freePort(t)
	opts.App, opts.Java = app, java
	opts.JVMArgs = append(opts.JVMArgs, "-Dready.port="+strconv.Itoa(port))
	return readyJVM{JVM: jvmtest.StartJVM(t, opts), readyPort: port}
}

// requireAlive checks that the JVM process runs and that the application in it still answers its own
// readiness check.
func (j readyJVM) requireAlive(t *testing.T, after string) {
	t.Helper()
	if !j.Alive() {
		t.Fatalf("after %s: the JVM ended:\n%s", after, j.Output())
	}
	// The timeout only bounds a hung application; a loaded machine can take
	// more than the 10 s it once was to answer.
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", j.readyPort))
	if err != nil {
		t.Fatalf("after %s: the application does not answer its readiness check: %v\n%s", after, err, j.Output())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ready\n" {
		t.Fatalf("after %s: readiness check: %s %q", after, resp.Status, body)
	}
}

// TestCorpusOfBadConfigsNeverHarmsAJVM runs jmx-attach inject with the shipped agent against one JVM per JDK
// (17 and the newest, 25 here), with each config of the corpus in turn: every attempt is an error with a named
// reason (never internal), and after each the JVM runs and its application answers its own readiness check.
// At the end a valid config is injected into the same JVM and serves, and the corpus is tried again as
// reconfigurations of that agent: each refused (config-invalid or config-rejected), the JVM alive, the valid
// config still served. A JVM started with the upstream
// jmx_exporter 1.0.1 as -javaagent is refused with agent-already-present and lives on.
func TestCorpusOfBadConfigsNeverHarmsAJVM(t *testing.T) {
	t.Parallel()
	if len(corpus) < 25 {
		t.Fatalf("the corpus has %d cases, the issue asks for at least 25", len(corpus))
	}
	if jvmtest.ReasonConfigInvalid != string(jvm.ReasonConfigInvalid) || jvmtest.CorpusConfigSizeLimit != jvm.MaxConfigSize {
		t.Fatalf("jvmtest's copies of jvm.ReasonConfigInvalid (%q) and jvm.MaxConfigSize (%d) are out of date",
			jvmtest.ReasonConfigInvalid, jvmtest.CorpusConfigSizeLimit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	agent, err := jvmtest.AgentJar(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ready := buildReadyApp(t, dir)
	jdks := map[string]string{"jdk17": "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"}
	if java, version := jvmtest.NewestJDK(18); java != "" {
		jdks["jdk"+strings.SplitN(version, ".", 2)[0]] = java
	}
	if len(jdks) < 2 {
		t.Fatal("no JDK newer than 17 found under /usr/lib/jvm")
	}
	for name, java := range jdks {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			jv := startReadyJVM(t, ready, java, jvmtest.Options{})
			target := targetDir(t)
			busy, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			inject := func(configFile string, port int) (jvm.InjectResult, int, string) {
				out, stderr, code := runBinary(t, "inject", "--agent", agent, "--config", configFile, "--port", strconv.Itoa(port),
					"--host", "127.0.0.1", "--pid", strconv.Itoa(jv.Pid), "--min-age", "0s", "--json", "--target-dir", target,
					"--termination-log", "")
				return parseLines(t, out)[0], code, stderr
			}
			// Files a config names (a key store) are this JDK's own: the subtests run in parallel.
			caseDir := filepath.Join(dir, name)
			if err := os.Mkdir(caseDir, 0o755); err != nil {
				t.Fatal(err)
			}
			reasons := map[jvm.Reason]int{}
			refusals := 0 // the attempts the agent itself refused: each is one load
			for i, tc := range corpus {
				file := filepath.Join(dir, fmt.Sprintf("%s-case-%02d.yaml", name, i))
				if err := os.WriteFile(file, tc.config(t, caseDir), 0o644); err != nil {
					t.Fatal(err)
				}
				port := freePort(t)
				if tc.busyPort {
					port = busy.Addr().(*net.TCPAddr).Port
				}
				res, code, stderr := inject(file, port)
				ok := false
				for _, r := range tc.want {
					ok = ok || res.Reason == r
				}
				if res.Status != jvm.OutcomeError || !ok || (code != exitFailed && code != exitBadAgent) {
					t.Errorf("%s: exit %d, result %+v, want an error with reason %v\nstderr: %s", tc.name, code, res, tc.want, stderr)
				}
				reasons[res.Reason]++
				if strings.Contains(res.Message, "refused to start") {
					refusals++
				}
				t.Logf("%-42s %s: %.160s", tc.name, res.Reason, res.Message)
				jv.requireAlive(t, tc.name)
			}
			loads := strings.Count(jv.Output(), jvmtest.AgentLinePrefix+"refused: ")
			t.Logf("%d cases, reasons %v; the agent was loaded and refused %d times", len(corpus), reasons, loads)
			if loads != refusals || refusals == 0 {
				t.Fatalf("the JVM printed %d refusals of the agent, jmx-attach reported %d:\n%s", loads, refusals, jv.Output())
			}

			good := filepath.Join(dir, name+"-good.yaml")
			if err := os.WriteFile(good, []byte("rules:\n- pattern: \".*\"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			port := freePort(t)
			res, code, stderr := inject(good, port)
			if code != exitOK || res.Status != jvm.OutcomeOK {
				t.Fatalf("a valid config after the corpus: exit %d, %+v\nstderr: %s\njvm: %s", code, res, stderr, jv.Output())
			}
			if body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port)); !strings.Contains(body, "jvm_memory_used_bytes") {
				t.Fatalf("metrics after the corpus:\n%.2000s", body)
			}
			jv.requireAlive(t, "the valid config")
			if n := strings.Count(jv.Output(), jvmtest.AgentLinePrefix+"serving"); n != 1 {
				t.Fatalf("the agent reports serving %d times, want once:\n%s", n, jv.Output())
			}

			// The same corpus as reconfigurations of the serving agent: each is refused, by the prefilter
			// (config-invalid) or by the agent, which keeps its config (config-rejected); the JVM lives and
			// the valid config keeps serving.
			for i, tc := range corpus {
				if tc.busyPort {
					continue // a valid config: the port of a serving agent does not change
				}
				file := filepath.Join(dir, fmt.Sprintf("%s-case-%02d.yaml", name, i))
				out, stderr, code := runBinary(t, "reconfigure", "--config", file, "--pid", strconv.Itoa(jv.Pid), "--json",
					"--termination-log", "")
				res := parseLines(t, out)[0]
				if res.Status != jvm.OutcomeError || (res.Reason != jvm.ReasonConfigInvalid && res.Reason != jvm.ReasonConfigRejected) ||
					(code != exitFailed && code != exitBadAgent) {
					t.Errorf("reconfigure %s: exit %d, %+v, want config-invalid or config-rejected\nstderr: %s", tc.name, code, res, stderr)
				}
				t.Logf("reconfigure %-30s %s: %.120s", tc.name, res.Reason, res.Message)
				jv.requireAlive(t, "reconfigure "+tc.name)
			}
			if body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port)); !strings.Contains(body, "jvm_memory_used_bytes") {
				t.Fatalf("metrics after the rejected reconfigurations:\n%.2000s", body)
			}
		})
	}
	t.Run("jmx_exporter already a -javaagent", func(t *testing.T) {
		t.Parallel()
		upstream, err := jvmtest.JMXExporterJar(ctx)
		if err != nil {
			t.Fatal(err)
		}
		exporterPort := freePort(t)
		jv := startReadyJVM(t, ready, "java", jvmtest.Options{JVMArgs: []string{
			"-javaagent:" + upstream + "=127.0.0.1:" + strconv.Itoa(exporterPort) + ":" + config}})
		out, stderr, code := runBinary(t, "inject", "--agent", agent, "--config", config, "--port", strconv.Itoa(freePort(t)),
			"--host", "127.0.0.1", "--pid", strconv.Itoa(jv.Pid), "--min-age", "0s", "--json", "--target-dir", targetDir(t),
			"--termination-log", "")
		res := parseLines(t, out)[0]
		if code != exitFailed || res.Reason != jvm.ReasonAgentAlreadyPresent {
			t.Fatalf("exit %d, %+v, want %s\nstderr: %s", code, res, jvm.ReasonAgentAlreadyPresent, stderr)
		}
		jv.requireAlive(t, "the injection")
		if jvmtest.AttachListenerStarted(jv.Pid) {
			t.Fatal("the JVM was signalled")
		}
		if body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", exporterPort)); !strings.Contains(body, "jvm_memory") {
			t.Fatalf("the JVM's own exporter:\n%.2000s", body)
		}
	})
}
