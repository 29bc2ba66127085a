package atstart

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	pkgjvm "github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
	"github.com/handlerkit/handlerkit/pkg/testenv/freeport"
)

// These tests start real JVMs with the environment Mutate gives a container, and the production agent jar
// (jvmtest.AgentJar: the jar `make agent` builds and the image ships) where the pod's volume would hold it.

// scrapeTimeout bounds the wait for an agent's first scrape.
const scrapeTimeout = 2 * time.Minute

// dynamicLoadWarning is what JDK 21+ prints when an agent is loaded into a running JVM (JEP 451).
const dynamicLoadWarning = "WARNING: A Java agent has been loaded dynamically"

// jvmConfig names the sample application's counter, so that a scrape shows the JVM's own MBeans.
const jvmConfig = `lowercaseOutputName: true
rules:
  - pattern: 'dev.handlerkit.sample<type=Counter><>Count'
    name: sample_requests_total
    type: COUNTER
  - pattern: '.*'
`

var (
	jarOnce sync.Once
	jarPath string
	jarErr  error
	appOnce sync.Once
	app     jvmtest.App
	appDir  string
	appErr  error
)

func agentJar(t testing.TB) string {
	t.Helper()
	jarOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		jarPath, jarErr = jvmtest.AgentJar(ctx)
	})
	if jarErr != nil {
		t.Fatal(jarErr)
	}
	return jarPath
}

// TestMain removes the sample application's build directory after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if appDir != "" {
		os.RemoveAll(appDir)
	}
	os.Exit(code)
}

func sampleApp(t testing.TB) jvmtest.App {
	t.Helper()
	appOnce.Do(func() {
		appDir, appErr = os.MkdirTemp("", "atstart-sample-")
		if appErr != nil {
			return
		}
		app, appErr = jvmtest.BuildSampleApp(appDir)
	})
	if appErr != nil {
		t.Fatal(appErr)
	}
	return app
}

type jdk struct{ name, java string }

const (
	jdk17Java = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
	jdk25Java = "/usr/lib/jvm/temurin-25-jdk-amd64/bin/java"
)

// jdks returns JDK 17 and JDK 25, skipping the test for one that is missing.
func jdks(t testing.TB) []jdk {
	t.Helper()
	var out []jdk
	for _, j := range []jdk{{"jdk17", jdk17Java}, {"jdk25", jdk25Java}} {
		if _, err := os.Stat(j.java); err == nil {
			out = append(out, j)
		} else {
			// make test installs JDK 17 (hack/prereqs.sh): under CI its
			// absence is a failure, not a skip.
			if j.name == "jdk17" && os.Getenv("CI") != "" {
				t.Fatalf("%s: %v (make test installs it)", j.name, err)
			}
			t.Logf("%s: %v; not run", j.name, err)
		}
	}
	if len(out) == 0 {
		t.Skip("neither JDK 17 nor JDK 25 is installed")
	}
	return out
}

func port(t testing.TB) int32 {
	t.Helper()
	p, err := freeport.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	return int32(p)
}

// injectedEnv mutates a pod whose container "app" has userEnv and returns that container's environment as the
// mutated pod gives it (KEY=VALUE), with the jar's path inside the container mapped to the production jar here,
// as the kubelet's volume would map it.
func injectedEnv(t testing.TB, userEnv []corev1.EnvVar, config string, p int32) []string {
	t.Helper()
	in := testInput()
	in.Port, in.Config = p, []byte(config)
	got, res := mutate(t, newPod(container("app", userEnv...)), in)
	if len(res.Injected) != 1 {
		t.Fatalf("not injected: %q", res.Notes)
	}
	jar := agentJar(t)
	var env []string
	for _, e := range got.Spec.Containers[0].Env {
		if e.ValueFrom != nil {
			t.Fatalf("env %s has valueFrom", e.Name)
		}
		env = append(env, e.Name+"="+strings.ReplaceAll(e.Value, MountPath+DefaultAgentPath, jar))
	}
	return env
}

// setEnv returns env with name set to value (or removed when value is "-").
func setEnv(env []string, name, value string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	if value != "-" {
		out = append(out, name+"="+value)
	}
	return out
}

func startJVM(t testing.TB, java string, env []string) *jvmtest.JVM {
	t.Helper()
	return jvmtest.StartJVM(t, jvmtest.Options{App: sampleApp(t), Java: java, JVMArgs: []string{"-Xmx64m"}, Env: env,
		ReadyTimeout: 2 * time.Minute})
}

// agentLines waits (up to a minute) until out holds at least n lines of the agent and returns them all.
func agentLines(t testing.TB, out func() string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var lines []string
		for _, l := range strings.Split(out(), "\n") {
			if strings.HasPrefix(l, jvmtest.AgentLinePrefix) {
				lines = append(lines, l)
			}
		}
		if len(lines) >= n || time.Now().After(deadline) {
			return lines
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// scrape waits until the agent on p answers /metrics with a body holding want, and returns the body.
func scrape(t *testing.T, p int32, want string) string {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", p)
	client := &http.Client{Timeout: 10 * time.Second}
	deadline := time.Now().Add(scrapeTimeout)
	last := ""
	for time.Now().Before(deadline) {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body), want) {
				return string(body)
			}
			last = fmt.Sprintf("%d %.200s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("GET %s: no %q within %s; last: %s", url, want, scrapeTimeout, last)
	return ""
}

func listening(p int32) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func tool(java, name string) string { return filepath.Join(filepath.Dir(java), name) }

// A container that sets JAVA_TOOL_OPTIONS itself: the JVM reads the user's option and the agent's, both apply,
// and /metrics serves the JVM's MBeans. On JDK 25 the start-time load prints no JEP 451 warning.
func TestAtStartTheUsersOptionsAndTheAgentBothApply(t *testing.T) {
	for _, j := range jdks(t) {
		t.Run(j.name, func(t *testing.T) {
			p := port(t)
			env := injectedEnv(t, []corev1.EnvVar{{Name: JavaToolOptions, Value: "-Dfoo=bar"}}, jvmConfig, p)
			start := time.Now()
			jvm := startJVM(t, j.java, env)
			scrape(t, p, "sample_requests_total")
			t.Logf("%s: JVM start to the first scrape with the application's MBeans: %s", j.name, time.Since(start).Round(time.Millisecond))

			out := jvm.Output()
			if !strings.Contains(out, "Picked up JAVA_TOOL_OPTIONS: -Dfoo=bar -javaagent:") {
				t.Errorf("the JVM did not read both options:\n%s", out)
			}
			if lines := agentLines(t, jvm.Output, 1); len(lines) != 1 || !strings.Contains(lines[0], "serving on :"+strconv.Itoa(int(p))) {
				t.Errorf("agent lines = %q", lines)
			}
			props, err := exec.Command(tool(j.java, "jcmd"), strconv.Itoa(jvm.Pid), "VM.system_properties").CombinedOutput()
			if err != nil {
				t.Fatalf("jcmd: %v\n%s", err, props)
			}
			if !regexp.MustCompile(`(?m)^foo=bar$`).Match(props) {
				t.Errorf("-Dfoo=bar did not apply; system properties:\n%s", props)
			}
			if strings.Contains(jvm.Output(), dynamicLoadWarning) {
				t.Errorf("a start-time load printed the dynamic-load warning:\n%s", jvm.Output())
			}
		})
	}
}

// Whatever is wrong with the config, the variable or the port, the JVM starts and runs its application; the
// agent says why in one line on stderr and serves nothing.
func TestAtStartRefusalsNeverStopTheJVM(t *testing.T) {
	bad := "rules:\n  - pattern: 'java.lang<type=(Memory>'\n"
	for _, j := range jdks(t) {
		t.Run(j.name, func(t *testing.T) {
			for _, tc := range []struct {
				name string
				env  func(env []string, p int32) []string
				hold bool // a listener holds the port
				want string
			}{
				{"config the collector refuses", nil, false, "refused: config-invalid: Unclosed group"},
				{"variable unset", func(env []string, _ int32) []string { return setEnv(env, ConfigEnv, "-") }, false,
					"refused: config-invalid: environment variable HANDLERKIT_JMX_CONFIG is not set"},
				{"variable not base64", func(env []string, _ int32) []string { return setEnv(env, ConfigEnv, "gzip+base64:%%%") }, false,
					"refused: config-invalid: environment variable HANDLERKIT_JMX_CONFIG is not valid gzip+base64: (base64:"},
				{"variable not gzip", func(env []string, _ int32) []string {
					return setEnv(env, ConfigEnv, "gzip+base64:aGFuZGxlcmtpdA==")
				}, false, "refused: config-invalid: environment variable HANDLERKIT_JMX_CONFIG is not valid gzip+base64: (gzip:"},
				{"variable name malformed", func(env []string, p int32) []string {
					return setEnv(env, JavaToolOptions, "-javaagent:"+agentJar(t)+"="+strconv.Itoa(int(p))+":env:1BAD")
				}, false, "refused: config-invalid: Malformed arguments"},
				{"port in use", nil, true, "refused: port-in-use: cannot bind"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					p := port(t)
					config := jvmConfig
					if tc.name == "config the collector refuses" {
						config = bad
					}
					env := injectedEnv(t, nil, config, p)
					if tc.env != nil {
						env = tc.env(env, p)
					}
					if tc.hold {
						l, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
						if err != nil {
							t.Fatal(err)
						}
						defer l.Close()
					}
					jvm := startJVM(t, j.java, env) // returns once the application's main printed its ready line
					lines := agentLines(t, jvm.Output, 1)
					if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
						t.Fatalf("agent lines = %q, want one with %q\n%s", lines, tc.want, jvm.Output())
					}
					if !jvm.Alive() {
						t.Fatalf("the JVM ended:\n%s", jvm.Output())
					}
					if !tc.hold && listening(p) {
						t.Errorf("port %d listens after a refusal", p)
					}
				})
			}
		})
	}
}

// A container whose /tmp is not writable (a read-only root file system): the collector's private copy of the
// config goes to /dev/shm, and the agent serves.
func TestAtStartWithoutAWritableTmp(t *testing.T) {
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		if os.Getenv("CI") != "" {
			t.Fatalf("no /dev/shm on a CI machine: %v", err)
		}
		t.Skip("no /dev/shm here")
	}
	p := port(t)
	env := injectedEnv(t, []corev1.EnvVar{{Name: JavaToolOptions, Value: "-Djava.io.tmpdir=/nonexistent/tmp"}}, jvmConfig, p)
	jvm := startJVM(t, jdk17Java, env)
	scrape(t, p, "sample_requests_total")
	if lines := agentLines(t, jvm.Output, 1); len(lines) != 1 || !strings.Contains(lines[0], "serving on") {
		t.Errorf("agent lines = %q", lines)
	}
	left, _ := filepath.Glob("/dev/shm/handlerkit-jmx-agent-config-*")
	if len(left) != 0 {
		t.Errorf("copies left in /dev/shm: %q", left)
	}
}

// Every JVM of the container inherits JAVA_TOOL_OPTIONS: a second application JVM gets port-in-use and runs on,
// the first keeps serving; a JDK tool (jcmd) gets no agent at all and works as usual.
func TestAtStartSecondJVMsInTheContainer(t *testing.T) {
	for _, j := range jdks(t) {
		t.Run(j.name, func(t *testing.T) {
			p := port(t)
			env := injectedEnv(t, nil, jvmConfig, p)
			first := startJVM(t, j.java, env)
			scrape(t, p, "sample_requests_total")

			second := startJVM(t, j.java, env)
			if lines := agentLines(t, second.Output, 1); len(lines) != 1 || !strings.Contains(lines[0], "refused: port-in-use") {
				t.Errorf("second JVM: agent lines = %q", lines)
			}
			if !second.Alive() || !first.Alive() {
				t.Errorf("a JVM ended: first alive %v, second alive %v", first.Alive(), second.Alive())
			}
			scrape(t, p, "sample_requests_total")

			cmd := exec.Command(tool(j.java, "jcmd"), strconv.Itoa(first.Pid), "VM.version")
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("jcmd with the container's environment: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "handlerkit-jmx-agent: refused: jdk-tool: sun.tools.jcmd.JCmd is a JDK tool") {
				t.Errorf("jcmd output lacks the jdk-tool line:\n%s", out)
			}
			if strings.Contains(string(out), "port-in-use") || strings.Contains(string(out), "serving on") {
				t.Errorf("the agent started in jcmd:\n%s", out)
			}
		})
	}
}

// JEP 451: on JDK 25 an agent loaded at run time prints a warning (seen here, so the test can see it), and the
// same jar given at start prints none.
func TestAtStartPrintsNoDynamicLoadWarningOnJDK25(t *testing.T) {
	if _, err := os.Stat(jdk25Java); err != nil {
		t.Skipf("no JDK 25: %v", err)
	}
	atStart := startJVM(t, jdk25Java, injectedEnv(t, nil, jvmConfig, port(t)))
	if lines := agentLines(t, atStart.Output, 1); len(lines) != 1 || !strings.Contains(lines[0], "serving on") {
		t.Fatalf("agent lines = %q", lines)
	}

	// The same jar loaded at run time into another JDK 25 JVM.
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte(jvmConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	live := startJVM(t, jdk25Java, nil)
	p := port(t)
	out, err := exec.Command(tool(jdk25Java, "jcmd"), strconv.Itoa(live.Pid), "JVMTI.agent_load", agentJar(t),
		fmt.Sprintf("%d:%s", p, config)).CombinedOutput()
	if err != nil {
		t.Fatalf("jcmd JVMTI.agent_load: %v\n%s", err, out)
	}
	scrape(t, p, "sample_requests_total")
	if lines := agentLines(t, live.Output, 1); len(lines) != 1 || !strings.Contains(lines[0], "serving on") {
		t.Fatalf("live agent lines = %q", lines)
	}
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(live.Output(), dynamicLoadWarning) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(live.Output(), dynamicLoadWarning) {
		t.Fatalf("the run-time load printed no %q, so its absence proves nothing:\n%s", dynamicLoadWarning, live.Output())
	}
	if strings.Contains(atStart.Output(), dynamicLoadWarning) {
		t.Errorf("the start-time load printed %q:\n%s", dynamicLoadWarning, atStart.Output())
	}
}

// Mode Both: a JVM that has the agent from its start refuses a live attach of it (agent-already-present) and
// keeps serving: the operator never gets a second exporter into one JVM.
func TestAtStartAgentRefusesALiveLoadOnTop(t *testing.T) {
	p := port(t)
	jvm := startJVM(t, jdk17Java, injectedEnv(t, nil, jvmConfig, p))
	scrape(t, p, "sample_requests_total")
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte(jvmConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool(jdk17Java, "jcmd"), strconv.Itoa(jvm.Pid), "JVMTI.agent_load", agentJar(t),
		fmt.Sprintf("%d:%s", port(t), config)).CombinedOutput()
	if err != nil {
		t.Fatalf("jcmd JVMTI.agent_load: %v\n%s", err, out)
	}
	lines := agentLines(t, jvm.Output, 2)
	if len(lines) != 2 || !strings.Contains(lines[1], "refused: agent-already-present: handlerkit-jmx-agent is already serving in this JVM (port "+strconv.Itoa(int(p))+", config env:HANDLERKIT_JMX_CONFIG)") {
		t.Errorf("agent lines = %q", lines)
	}
	scrape(t, p, "sample_requests_total")
}

// Mode Both, on the operator's live path: jmx-attach's injector finds the agent in the JVM's JAVA_TOOL_OPTIONS
// (its jar's Premain-Class, read through the JVM's root) and refuses before any signal: the JVM prints no second
// agent line.
func TestAtStartLiveInjectRefusesBeforeAnySignal(t *testing.T) {
	p := port(t)
	j := startJVM(t, jdk17Java, injectedEnv(t, nil, jvmConfig, p))
	scrape(t, p, "sample_requests_total")
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte(jvmConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := pkgjvm.NewInjector(pkgjvm.WithMinAge(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := in.Inject(ctx, j.Pid, pkgjvm.Agent{Jar: agentJar(t), Config: config, Port: int(port(t))})
	if res.Status != pkgjvm.OutcomeError || res.Reason != pkgjvm.ReasonAgentAlreadyPresent {
		t.Fatalf("Inject = %+v, want %s", res, pkgjvm.ReasonAgentAlreadyPresent)
	}
	if !strings.Contains(res.Message, "so nothing is loaded") {
		t.Errorf("message = %q, want the injector's own refusal", res.Message)
	}
	// No signal: the JVM never started its attach listener, and printed no second agent line.
	if _, err := os.Stat(fmt.Sprintf("/tmp/.java_pid%d", j.Pid)); !os.IsNotExist(err) {
		t.Errorf("the JVM's attach socket exists (%v): it was signalled", err)
	}
	if lines := agentLines(t, j.Output, 1); len(lines) != 1 {
		t.Errorf("agent lines = %q, want the start-time one only", lines)
	}
	scrape(t, p, "sample_requests_total")
}

// The one thing no agent can survive: its jar missing at the -javaagent path ends the JVM before main (the JVM's
// own rule). The volume (an image volume, or the init container's verified copy) is what rules it out.
func TestAtStartMissingJarStopsTheJVM(t *testing.T) {
	cmd := exec.Command(jdk17Java, "-version")
	cmd.Env = append(os.Environ(), JavaToolOptions+"="+AgentOption("/nonexistent/handlerkit/jmx-agent.jar", 9404))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the JVM started without its agent jar:\n%s", out)
	}
	if !strings.Contains(string(out), "/nonexistent/handlerkit/jmx-agent.jar") {
		t.Errorf("output does not name the jar:\n%s", out)
	}
	t.Logf("exit %v:\n%s", err, out)
}

// BenchmarkAtStartStartupCost: what the agent at start costs a JVM's start, the time from exec to the
// application's first line (the agent's premain runs before main), with and without the agent, alternately, on
// each JDK. Reported as ms-without and ms-with (means over b.N) for docs/atstart.md's figures:
//
//	go test -run '^$' -bench AtStartStartupCost -benchtime 3x ./pkg/inject/atstart/
func BenchmarkAtStartStartupCost(b *testing.B) {
	for _, j := range jdks(b) {
		b.Run(j.name, func(b *testing.B) {
			var with, without []time.Duration
			for range b.N {
				start := time.Now()
				plain := startJVM(b, j.java, nil)
				without = append(without, time.Since(start))
				_ = plain.Stop()

				p := port(b)
				env := injectedEnv(b, nil, jvmConfig, p)
				start = time.Now()
				injected := startJVM(b, j.java, env)
				with = append(with, time.Since(start))
				if lines := agentLines(b, injected.Output, 1); len(lines) != 1 || !strings.Contains(lines[0], "serving on") {
					b.Fatalf("agent lines = %q", lines)
				}
				_ = injected.Stop()
			}
			b.ReportMetric(meanMS(without), "ms-without")
			b.ReportMetric(meanMS(with), "ms-with")
			b.Logf("%s: exec to the application's first line: without the agent %v, with it %v", j.name, round(without), round(with))
		})
	}
}

// meanMS is the mean of ds in milliseconds.
func meanMS(ds []time.Duration) float64 {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return float64(sum.Milliseconds()) / float64(len(ds))
}

func round(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
