package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/internal/testbuild"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
	"github.com/handlerkit/handlerkit/pkg/testenv/freeport"
)

var (
	binary   string
	agentJar string
	app      jvmtest.App
	config   string
)

func TestMain(m *testing.M) {
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "jmx-attach-test-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	// Unprivileged tests run jmx-attach as other users: they must reach the binary, jar and config.
	if err := os.Chmod(dir, 0o755); err != nil {
		return 0, err
	}
	// Built as it ships (testbuild.ReleaseFlags) and kept between runs
	// (testbuild.Build): a warm run does not link it again.
	bins, err := testbuild.Build(context.Background(), "", dir, testbuild.ReleaseFlags, testbuild.ReleaseEnv, ".")
	if err != nil {
		return 0, fmt.Errorf("build: %w", err)
	}
	binary = bins[0]
	if agentJar, err = jvmtest.BuildTestAgent(dir); err != nil {
		return 0, err
	}
	if app, err = jvmtest.BuildSampleApp(dir); err != nil {
		return 0, err
	}
	config = filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte("rules:\n- pattern: \".*\"\n"), 0o644); err != nil {
		return 0, err
	}
	return m.Run(), nil
}

// runBinary runs the built jmx-attach and returns stdout, stderr and the exit code.
func runBinary(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runCommand(t, append([]string{binary}, args...)...)
}

// runCommand runs argv (jmx-attach under a wrapper such as setpriv) and returns stdout, stderr and the exit code.
func runCommand(t *testing.T, argv ...string) (string, string, int) {
	t.Helper()
	return runWith(t, nil, nil, argv...)
}

// runWith runs argv with stdin and extra environment variables and returns stdout, stderr and the exit code.
func runWith(t *testing.T, stdin []byte, env []string, argv ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// freePort returns a free loopback TCP port outside the ephemeral range, so
// no outgoing connection can take it before the test binds it.
func freePort(t *testing.T) int {
	t.Helper()
	p, err := freeport.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func targetDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "jmx-attach-target-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func parseLines(t *testing.T, out string) []jvm.InjectResult {
	t.Helper()
	var res []jvm.InjectResult
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		r, err := jvm.ParseInjectResult([]byte(line))
		if err != nil {
			t.Fatalf("result line %q: %v", line, err)
		}
		res = append(res, r)
	}
	return res
}

func TestBinaryIsStatic(t *testing.T) {
	f, err := elf.Open(binary)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Fatalf("binary has program header %v: not static", p.Type)
		}
	}
}

func TestHelpForEveryCommand(t *testing.T) {
	cases := map[string][]string{
		"Commands:":                     {"--help"},
		"Usage: jmx-attach list":        {"list", "--help"},
		"Usage: jmx-attach inject":      {"inject", "--help"},
		"Result lines: one per JVM.":    {"help", "inject"},
		"Usage: jmx-attach reconfigure": {"reconfigure", "--help"},
	}
	for want, args := range cases {
		out, _, code := runBinary(t, args...)
		if code != exitOK || strings.Count(out, want) != 1 || !strings.Contains(out, "Exit codes") {
			t.Errorf("%v: exit %d, output lacks %q or exit codes:\n%s", args, code, want, out)
		}
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"inject", "--agent", "a.jar", "--config", "c.yaml", "--port", "9404"},
		{"inject", "--agent", "a.jar", "--config", "c.yaml", "--port", "9404", "--pid", "1", "--all"},
		{"inject", "--agent", "a.jar", "--config", "c.yaml", "--port", "0", "--pid", "1"},
		{"inject", "--agent", "a.jar", "--config", "c.yaml", "--port", "9404,9405", "--pid", "1"},
		{"inject", "--agent", "a.jar", "--config", "c.yaml", "--port", "9404,x", "--all"},
		{"inject", "--no-such-flag"},
		{"inject", "--bundle-stdin", "--agent", "a.jar", "--port", "9404", "--pid", "1"},
		{"inject", "--agent", "a.jar", "--config", "c.yaml", "--config-env", "X", "--port", "9404", "--pid", "1"},
		{"inject", "--agent", "a.jar", "--config-env", "HANDLERKIT_SURELY_UNSET", "--port", "9404", "--pid", "1"},
		{"inject", "--agent", "a.jar", "--config", "c.yaml", "--port", "9404", "--pid", "1", "--jvm", "x.*"},
		{"inject", "--agent", "a.jar", "--config", "c.yaml", "--port", "9404", "--all", "--jvm", "[a-"},
		{"inject", "--agent", "a.jar", "--config", "c.yaml", "--port", "9404", "--pid", "1", "--wait", "-1s"},
		{"inject", "--agent", "a.jar", "--config", "c.yaml", "--port", "9404", "--pid", "1", "--min-memory-headroom", "32MB"},
		{"inject", "--agent", "a.jar", "--config", "c.yaml", "--port", "9404", "--pid", "1", "--min-memory-headroom", "-1"},
		{"reconfigure", "--pid", "1"},
		{"reconfigure", "--config", "c.yaml"},
		{"reconfigure", "--config", "c.yaml", "--bundle-stdin", "--pid", "1"},
		{"list", "extra"},
	} {
		_, stderr, code := runBinary(t, args...)
		if code != exitUsage || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q; want %d with a message", args, code, stderr, exitUsage)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "33554432": 32 << 20, "32Mi": 32 << 20, "32MiB": 32 << 20, "1Gi": 1 << 30, "512Ki": 512 << 10} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "32MB", "-1", "Mi", "1.5Gi", "9999999999999Gi"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
}

func TestListShowsRunningJVM(t *testing.T) {
	t.Parallel()
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: app})
	out, _, code := runBinary(t, "list", "--json")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	var jvms []jvm.JVM
	if err := json.Unmarshal([]byte(out), &jvms); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	found := false
	for _, j := range jvms {
		if j.PID == jv.Pid && j.MainClass == jvmtest.SampleMainClass {
			found = true
		}
	}
	if !found {
		t.Fatalf("JVM %d not listed: %s", jv.Pid, out)
	}
	table, _, code := runBinary(t, "list")
	if code != exitOK || !strings.Contains(table, strconv.Itoa(jv.Pid)) || !strings.Contains(table, jvmtest.SampleMainClass) {
		t.Fatalf("table (exit %d) lacks the JVM:\n%s", code, table)
	}
}

func TestInjectPrintsResultLineAndWritesTerminationLog(t *testing.T) {
	t.Parallel()
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: app})
	port := freePort(t)
	termLog := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(termLog, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"inject", "--agent", agentJar, "--config", config, "--port", strconv.Itoa(port), "--host", "127.0.0.1",
		"--pid", strconv.Itoa(jv.Pid), "--min-age", "0s", "--json", "--target-dir", targetDir(t), "--termination-log", termLog}
	out, stderr, code := runBinary(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s\njvm: %s", code, out, stderr, jv.Output())
	}
	res := parseLines(t, out)
	if len(res) != 1 || res[0].Status != jvm.OutcomeOK || res[0].PID != jv.Pid || res[0].Port != port {
		t.Fatalf("results: %+v", res)
	}
	logged, err := os.ReadFile(termLog)
	if err != nil {
		t.Fatal(err)
	}
	// The termination log is compact: the paths stay in the marker.
	want := res[0]
	want.AgentPath, want.ConfigPath = "", ""
	if got, err := jvm.ParseTerminationLog(logged); err != nil || len(got) != 1 || got[0] != want {
		t.Fatalf("termination log %+v (%v), want %+v", got, err, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // only bounds a hung agent
	defer cancel()
	body, err := jvm.Scrape(ctx, jv.Pid, "127.0.0.1", port)
	if err != nil || !strings.Contains(body, `jvm_memory_bytes_used{area="heap"}`) {
		t.Fatalf("scrape: %v\n%s", err, body)
	}

	out, _, code = runBinary(t, args...)
	if code != exitOK {
		t.Fatalf("second inject: exit %d: %s", code, out)
	}
	if res := parseLines(t, out); res[0].Status != jvm.OutcomeAlreadyInjected {
		t.Fatalf("second inject: %+v", res)
	}
	if !jv.Alive() {
		t.Fatalf("JVM died: %s", jv.Output())
	}
}

func TestInjectWithBadConfigExitsFourAndLeavesJVMAlone(t *testing.T) {
	t.Parallel()
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: app})
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code := runBinary(t, "inject", "--agent", agentJar, "--config", bad, "--port", strconv.Itoa(freePort(t)),
		"--pid", strconv.Itoa(jv.Pid), "--min-age", "0s", "--json", "--target-dir", targetDir(t), "--termination-log", "")
	if code != exitBadAgent {
		t.Fatalf("exit %d, want %d: %s", code, exitBadAgent, out)
	}
	if res := parseLines(t, out); res[0].Reason != jvm.ReasonConfigInvalid {
		t.Fatalf("result: %+v", res)
	}
	if jvmtest.AttachListenerStarted(jv.Pid) || !jv.Alive() {
		t.Fatalf("JVM was signalled (socket exists) or died (alive=%v)", jv.Alive())
	}
}

// TestConfigEnvTakesAGzippedConfigAndRefusesAGzipBomb injects with the compact --config-env form the operator
// uses, and refuses, before any JVM is touched, a value that decompresses to more than 1 MiB.
func TestConfigEnvTakesAGzippedConfigAndRefusesAGzipBomb(t *testing.T) {
	t.Parallel()
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: app})
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	zw.Write([]byte("rules: []\n"))
	zw.Write(bytes.Repeat([]byte("#"), 32<<20))
	zw.Close()
	good, err := jvm.EncodeConfigEnv([]byte("rules:\n- pattern: \".*\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	inject := func(value string) (string, string, int) {
		return runWith(t, nil, []string{"JMX_CONFIG=" + value}, binary, "inject", "--agent", agentJar, "--config-env", "JMX_CONFIG",
			"--port", strconv.Itoa(freePort(t)), "--host", "127.0.0.1", "--pid", strconv.Itoa(jv.Pid), "--min-age", "0s",
			"--json", "--target-dir", targetDir(t), "--termination-log", "")
	}
	out, stderr, code := inject(jvm.ConfigEnvGzipPrefix + base64.StdEncoding.EncodeToString(bomb.Bytes()))
	if code != exitBadAgent || parseLines(t, out)[0].Reason != jvm.ReasonConfigInvalid {
		t.Fatalf("gzip bomb: exit %d, want %d config-invalid: %s %s", code, exitBadAgent, out, stderr)
	}
	if jvmtest.AttachListenerStarted(jv.Pid) || !jv.Alive() {
		t.Fatalf("JVM was signalled (socket exists) or died (alive=%v)", jv.Alive())
	}
	out, stderr, code = inject(good)
	if code != exitOK || parseLines(t, out)[0].Status != jvm.OutcomeOK {
		t.Fatalf("gzipped config: exit %d: %s %s\njvm: %s", code, out, stderr, jv.Output())
	}
}

func TestInjectIntoNonJVMExitsOneAndSignalsNothing(t *testing.T) {
	t.Parallel()
	sleep := exec.Command("sleep", "60")
	sleep.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { sleep.Wait(); close(exited) }()
	t.Cleanup(func() { sleep.Process.Kill(); <-exited })
	out, _, code := runBinary(t, "inject", "--agent", agentJar, "--config", config, "--port", strconv.Itoa(freePort(t)),
		"--pid", strconv.Itoa(sleep.Process.Pid), "--json", "--target-dir", targetDir(t), "--termination-log", "")
	if code != exitFailed {
		t.Fatalf("exit %d, want %d: %s", code, exitFailed, out)
	}
	if res := parseLines(t, out); res[0].Reason != jvm.ReasonNotJVM {
		t.Fatalf("result: %+v", res)
	}
	// Without --json the line is key=value text.
	text, _, code := runBinary(t, "inject", "--agent", agentJar, "--config", config, "--port", strconv.Itoa(freePort(t)),
		"--pid", strconv.Itoa(sleep.Process.Pid), "--target-dir", targetDir(t), "--termination-log", "")
	want := "pid=" + strconv.Itoa(sleep.Process.Pid) + " nspid=0 status=error reason=\"not-jvm\""
	if code != exitFailed || !strings.HasPrefix(text, want) {
		t.Fatalf("exit %d, text line %q, want prefix %q", code, text, want)
	}
	select {
	case <-exited:
		t.Fatal("sleep exited")
	case <-time.After(300 * time.Millisecond):
	}
}

// TestPortCannotBeCheckedOutsideTheJVMsNetworkNamespaceWithoutCapSysAdmin runs jmx-attach without CAP_SYS_ADMIN
// (as under Pod Security "restricted") against a JVM in a network namespace of its own: jmx-attach cannot join
// it to check the port, so it refuses with port-check-failed before it touches the JVM.
func TestPortCannotBeCheckedOutsideTheJVMsNetworkNamespaceWithoutCapSysAdmin(t *testing.T) {
	t.Parallel()
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) is required: %v", err)
	}
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: app, PrivateNamespaces: true, PrivateNetwork: true})
	out, stderr, code := runCommand(t, setpriv, "--bounding-set=-sys_admin", binary, "inject", "--agent", agentJar,
		"--config", config, "--port", strconv.Itoa(freePort(t)), "--host", "127.0.0.1", "--pid", strconv.Itoa(jv.Pid),
		"--min-age", "0s", "--json", "--termination-log", "")
	if code != exitFailed {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitFailed, out, stderr)
	}
	res := parseLines(t, out)
	if res[0].Reason != jvm.ReasonPortCheckFailed || !strings.Contains(res[0].Message, "CAP_SYS_ADMIN") {
		t.Fatalf("result: %+v, want %s naming CAP_SYS_ADMIN", res[0], jvm.ReasonPortCheckFailed)
	}
	if _, err := os.Lstat(filepath.Join(jv.WorkDir, ".java_pid1")); err == nil || !jv.Alive() {
		t.Fatalf("JVM was signalled (attach socket exists) or died (alive=%v): %s", jv.Alive(), jv.Output())
	}
}

// TestInjectAllGivesEachJVMOfANetworkNamespaceItsOwnPort runs `inject --all` as a pod would see it: in a PID and
// mount namespace of its own, with a /proc and /tmp of its own, so that --all finds its two JVMs and none of
// other tests. The namespace shares this test's network namespace, so both JVMs compete for ports: the older
// gets --port, the younger the next free port, and each result line says which.
func TestInjectAllGivesEachJVMOfANetworkNamespaceItsOwnPort(t *testing.T) {
	t.Parallel()
	jdks := map[string]string{"default": "java"}
	if java, version := jvmtest.NewestJDK(18); java != "" {
		jdks["jdk"+strings.SplitN(version, ".", 2)[0]] = java
	}
	for name, java := range jdks {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			port := freePort(t)
			work := podTmp(t)
			script := `set -e
mount --make-rprivate /
mount -t proc proc /proc
mount --bind "$1" /tmp
cd /tmp
for i in 1 2; do
	"$2" -Xmx64m -cp /tmp/app.jar "$3" >/tmp/jvm$i.out 2>&1 &
	n=0
	until grep -q "$4" /tmp/jvm$i.out; do n=$((n+1)); [ $n -lt 600 ]; sleep 0.1; done
done
set +e
/tmp/jmx-attach inject --all --agent /tmp/agent.jar --config /tmp/config.yaml --port "$5" --host 127.0.0.1 \
	--min-age 0s --json --termination-log "" >/tmp/results 2>/tmp/stderr
echo $? >/tmp/rc.new && mv /tmp/rc.new /tmp/rc
exec sleep 600`
			cmd := exec.Command("/bin/sh", "-c", script, "sh", work, java, app.MainClass, jvmtest.SampleReadyLine, strconv.Itoa(port))
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Ending the namespace's first process ends every process in it.
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			rc := waitFile(t, filepath.Join(work, "rc"), 2*time.Minute)
			out, _ := os.ReadFile(filepath.Join(work, "results"))
			errOut, _ := os.ReadFile(filepath.Join(work, "stderr"))
			if strings.TrimSpace(rc) != "0" {
				t.Fatalf("inject --all: exit %s\nstdout: %s\nstderr: %s", rc, out, errOut)
			}
			res := parseLines(t, string(out))
			if len(res) != 2 {
				t.Fatalf("%d result lines, want 2 (one per JVM): %s", len(res), out)
			}
			ports := map[int]bool{}
			for _, r := range res {
				if r.Status != jvm.OutcomeOK {
					t.Fatalf("result %+v", r)
				}
				ports[r.Port] = true
				body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", r.Port))
				if !strings.Contains(body, `jvm_memory_bytes_used{area="heap"}`) {
					t.Fatalf("port %d: %s", r.Port, body)
				}
			}
			if !ports[port] || len(ports) != 2 {
				t.Fatalf("ports %v: want %d for the older JVM and another for the younger", ports, port)
			}
		})
	}
}

// podTmp returns a directory to serve as a pod's /tmp (world-writable and sticky) holding jmx-attach, the test
// agent, its config and the sample application.
func podTmp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "jmx-attach-pod-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{binary: "jmx-attach", agentJar: "agent.jar", config: "config.yaml", app.Jar: "app.jar"} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// waitFile waits until path exists and returns its contents.
func waitFile(t *testing.T, path string, timeout time.Duration) string {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if data, err := os.ReadFile(path); err == nil {
			return string(data)
		}
	}
	t.Fatalf("%s did not appear within %s", path, timeout)
	return ""
}

// httpGet returns the body of a 200 answer to GET url.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	// The first scrape of a fresh agent registers and reads every MBean; on
	// a loaded machine it took more than the 10 s this timeout once was. The
	// timeout only bounds a hung test.
	client := &http.Client{Timeout: 2 * time.Minute}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(body)
}
