package jvm

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

var heapMetric = regexp.MustCompile(`(?m)^jvm_memory_bytes_used\{area="heap"\} ([0-9]+)$`)

// testTargetDir returns a fresh directory, owned by root and searchable by every user, for the injections of a
// test to create their agent directories in; it is removed after the test.
func testTargetDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "jvm-target-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// agentDirOf returns the directory an injection created for its copies, checking that it is a new directory
// in parent with a random name.
func agentDirOf(t *testing.T, res InjectResult, parent string) string {
	t.Helper()
	dir := filepath.Dir(res.AgentPath)
	if filepath.Dir(dir) != parent || !strings.HasPrefix(filepath.Base(dir), AgentDirPrefix) ||
		len(filepath.Base(dir)) != len(AgentDirPrefix)+16 || filepath.Dir(res.ConfigPath) != dir {
		t.Fatalf("copies %s and %s are not in a new %s<random> directory in %s", res.AgentPath, res.ConfigPath, AgentDirPrefix, parent)
	}
	return dir
}

// attachSocketExists reports whether the JVM has started its attach listener, which it does only after a
// SIGQUIT with a trigger file present (or an earlier attach).
func attachSocketExists(t *testing.T, j JVM) bool {
	t.Helper()
	_, err := os.Lstat(filepath.Join("/proc", strconv.Itoa(j.PID), "root", "tmp", ".java_pid"+strconv.Itoa(j.NSPID)))
	return err == nil
}

// assertUntouched checks that the JVM is alive and was never signalled: no attach listener, no thread dump.
func assertUntouched(t *testing.T, jv *jvmtest.JVM) {
	t.Helper()
	if !jv.Alive() {
		t.Fatalf("JVM %d died; output:\n%s", jv.Pid, jv.Output())
	}
	j, err := Inspect(jv.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if attachSocketExists(t, j) {
		t.Errorf("JVM %d has an attach socket: it was signalled", jv.Pid)
	}
	if strings.Contains(jv.Output(), "Full thread dump") {
		t.Errorf("JVM %d printed a thread dump: it got SIGQUIT", jv.Pid)
	}
}

func requireOK(t *testing.T, res InjectResult) {
	t.Helper()
	if res.Status != OutcomeOK {
		t.Fatalf("inject: %+v", res)
	}
}

func scrapeHeap(t *testing.T, pid int, port int) int64 {
	t.Helper()
	// Generous: the deadline only bounds a hung agent (a first scrape took over 10 s under load).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body, err := Scrape(ctx, pid, "127.0.0.1", port)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	m := heapMetric.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no heap metric in:\n%s", body)
	}
	v, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDiscoverFindsJVMWithoutPerfData(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp, JVMArgs: []string{"-XX:-UsePerfData"}})
	jvms, err := Discover()
	if err != nil {
		t.Fatal(err)
	}
	var found *JVM
	for i := range jvms {
		if jvms[i].PID == jv.Pid {
			found = &jvms[i]
		}
	}
	if found == nil {
		t.Fatalf("Discover did not list JVM %d: %+v", jv.Pid, jvms)
	}
	if found.NSPID != jv.Pid {
		t.Errorf("NSPID = %d, want %d (same namespace)", found.NSPID, jv.Pid)
	}
	if found.MainClass != jvmtest.SampleMainClass {
		t.Errorf("MainClass = %q, want %q", found.MainClass, jvmtest.SampleMainClass)
	}
	if !strings.HasPrefix(found.JavaVersion, "17") {
		t.Errorf("JavaVersion = %q, want 17.x", found.JavaVersion)
	}
	if found.UID != os.Geteuid() || found.Age <= 0 || found.Age > time.Hour {
		t.Errorf("uid %d age %s: implausible", found.UID, found.Age)
	}
	if _, err := os.Stat(filepath.Join("/tmp", "hsperfdata_root", strconv.Itoa(jv.Pid))); err == nil {
		t.Errorf("hsperfdata exists although -XX:-UsePerfData")
	}
}

func TestDiscoverNeverReportsNonJVMs(t *testing.T) {
	t.Parallel()
	needJava(t)
	sleepPath, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	// A binary named java that is not a JVM, with a java-like command line.
	fakeJava := filepath.Join(t.TempDir(), "java")
	data, err := os.ReadFile(sleepPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fakeJava, data, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(path string) (*exec.Cmd, <-chan struct{}, error) {
		c := exec.Command(path, "60")
		exited, err := startChild(c)
		return c, exited, err
	}
	var procs []*exec.Cmd
	for _, path := range []string{sleepPath, fakeJava} {
		// A parallel test that forks while fakeJava is still open for
		// writing leaves a copy of that descriptor in its child until the
		// child execs, and exec then fails with ETXTBSY (golang/go#22315).
		// The window is short, so start again on that error only.
		// A wait on the descriptor's release, with a deadline generous for a loaded machine.
		c, exited, err := start(path)
		for deadline := time.Now().Add(30 * time.Second); errors.Is(err, syscall.ETXTBSY) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			c, exited, err = start(path)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); <-exited })
		procs = append(procs, c)
	}
	jvms, err := Discover()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range procs {
		for _, j := range jvms {
			if j.PID == c.Process.Pid {
				t.Errorf("Discover reported non-JVM %d (%v)", j.PID, j.Args)
			}
		}
		if _, err := Inspect(c.Process.Pid); !errors.Is(err, ErrNotJVM) {
			t.Errorf("Inspect(%d) = %v, want ErrNotJVM", c.Process.Pid, err)
		}
	}
}

func TestNonJVMIsNeverSignalled(t *testing.T) {
	t.Parallel()
	needJava(t)
	sleep := exec.Command("sleep", "60")
	exited, err := startChild(sleep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleep.Process.Kill(); <-exited })

	in := newTestInjector(t, WithTargetDir(testTargetDir(t)))
	res := in.Inject(context.Background(), sleep.Process.Pid, loopbackAgent(freePort(t)))
	if res.Status != OutcomeError || res.Reason != ReasonNotJVM {
		t.Fatalf("inject into sleep: %+v, want error %s", res, ReasonNotJVM)
	}
	// SIGQUIT's default action would have ended sleep; give a stray signal time to land.
	select {
	case <-exited:
		t.Fatalf("sleep exited: %v", sleep.ProcessState)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestInjectServesMBeanMetric runs its JVM with the JDK's default compilers
// and collector, as most users run theirs (the other tests' JVMs run with
// jvmtest.LightFlags).
func TestInjectServesMBeanMetric(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp, DefaultCompilers: true})
	port := freePort(t)
	dir := testTargetDir(t)
	res := newTestInjector(t, WithTargetDir(dir)).Inject(context.Background(), jv.Pid, loopbackAgent(port))
	requireOK(t, res)
	if res.NSPID != jv.Pid || filepath.Base(res.AgentPath) != jvmtest.AgentJarName || res.JavaVersion == "" {
		t.Errorf("result fields: %+v", res)
	}
	agentDirOf(t, res, dir)
	if heap := scrapeHeap(t, jv.Pid, port); heap <= 0 {
		t.Errorf("heap used = %d, want > 0", heap)
	}
	// The trigger files are gone.
	for _, p := range []string{filepath.Join(jv.WorkDir, ".attach_pid"+strconv.Itoa(jv.Pid)), "/tmp/.attach_pid" + strconv.Itoa(jv.Pid)} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("trigger %s left behind", p)
		}
	}
}

func TestSecondInjectReportsAlreadyInjected(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp})
	port := freePort(t)
	in := newTestInjector(t, WithTargetDir(testTargetDir(t)))
	requireOK(t, in.Inject(context.Background(), jv.Pid, loopbackAgent(port)))
	res := in.Inject(context.Background(), jv.Pid, loopbackAgent(port))
	if res.Status != OutcomeAlreadyInjected || !res.OK() {
		t.Fatalf("second inject: %+v, want %s", res, OutcomeAlreadyInjected)
	}
	// Another port is refused rather than loading a second exporter.
	other := in.Inject(context.Background(), jv.Pid, loopbackAgent(freePort(t)))
	if other.Status != OutcomeError || other.Reason != ReasonNotListening {
		t.Errorf("inject on another port: %+v, want %s", other, ReasonNotListening)
	}
	if !jv.Alive() {
		t.Fatalf("JVM died: %s", jv.Output())
	}
	if n := strings.Count(jv.Output(), "serving /metrics"); n != 1 {
		t.Errorf("agent started %d times, want 1", n)
	}
	scrapeHeap(t, jv.Pid, port)
}

func TestYoungJVMIsWaitedForNotKilled(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv, j := startInspected(t)
	// The minimum age is five seconds past the JVM's age when inspected, not
	// a fixed five seconds: on a loaded machine the JVM took 6.9 s to print
	// its ready line, and a fixed minimum left the test no young JVM to use.
	minAge := j.Age + 5*time.Second
	in := newTestInjector(t, WithMinAge(minAge), WithTargetDir(testTargetDir(t)))

	// A cancelled wait gives up without touching the JVM.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	res := in.Inject(ctx, jv.Pid, loopbackAgent(freePort(t)))
	cancel()
	if res.Reason != ReasonTooYoung {
		t.Fatalf("cancelled inject: %+v, want %s", res, ReasonTooYoung)
	}
	assertUntouched(t, jv)

	port := freePort(t)
	requireOK(t, in.Inject(context.Background(), jv.Pid, loopbackAgent(port)))
	after, err := Inspect(jv.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if after.Age < minAge {
		t.Errorf("injected at age %s, before the minimum age %s", after.Age, minAge)
	}
	if !jv.Alive() {
		t.Fatalf("JVM died: %s", jv.Output())
	}
	scrapeHeap(t, jv.Pid, port)
}

func TestPrecheckFailuresLeaveJVMUntouched(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp})
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noAgentClass := filepath.Join(dir, "no-agent-class.jar")
	if err := jvmtest.WriteJar(noAgentClass, "", map[string]string{"Premain-Class": jvmtest.AgentClass}); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port

	cases := []struct {
		name  string
		agent Agent
		want  Reason
	}{
		{"bad YAML", Agent{Jar: testAgentJar, Config: write("bad.yaml", "rules: [\n  - pattern: x\n"), Port: freePort(t)}, ReasonConfigInvalid},
		{"unknown key", Agent{Jar: testAgentJar, Config: write("typo.yaml", "rule:\n- pattern: x\n"), Port: freePort(t)}, ReasonConfigInvalid},
		{"rules not a list", Agent{Jar: testAgentJar, Config: write("rules.yaml", "rules: yes\n"), Port: freePort(t)}, ReasonConfigInvalid},
		{"missing config", Agent{Jar: testAgentJar, Config: filepath.Join(dir, "absent.yaml"), Port: freePort(t)}, ReasonConfigInvalid},
		{"missing jar", Agent{Jar: filepath.Join(dir, "absent.jar"), Config: testConfig, Port: freePort(t)}, ReasonAgentJarInvalid},
		{"jar without Agent-Class", Agent{Jar: noAgentClass, Config: testConfig, Port: freePort(t)}, ReasonAgentJarInvalid},
		{"not a jar", Agent{Jar: testConfig, Config: testConfig, Port: freePort(t)}, ReasonAgentJarInvalid},
		{"port in use", Agent{Jar: testAgentJar, Config: testConfig, Port: busyPort, Host: "127.0.0.1"}, ReasonPortInUse},
		{"port out of range", Agent{Jar: testAgentJar, Config: testConfig, Port: 70000}, ReasonInvalidRequest},
	}
	in := newTestInjector(t, WithTargetDir(testTargetDir(t)))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := in.Inject(context.Background(), jv.Pid, tc.agent)
			if res.Status != OutcomeError || res.Reason != tc.want {
				t.Fatalf("inject: %+v, want reason %s", res, tc.want)
			}
			if res.Message == "" {
				t.Errorf("no message")
			}
			assertUntouched(t, jv)
		})
	}
}

// TestLoadOnBusyPortWithoutPrecheckKillsJVM shows why the port pre-check exists: the test agent, like
// jmx_exporter, calls System.exit when it cannot bind. It also checks how such a death is reported: the JVM
// closes the attach connection without a reply, and that is process-gone, not a guess at a credential problem.
func TestLoadOnBusyPortWithoutPrecheckKillsJVM(t *testing.T) {
	t.Parallel()
	needJava(t)
	for _, jdk := range testJDKs(t) {
		t.Run(jdk.name, func(t *testing.T) {
			t.Parallel()
			jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp, Java: jdk.java})
			busy, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			j, err := Inspect(jv.Pid)
			if err != nil {
				t.Fatal(err)
			}
			opts := "127.0.0.1:" + strconv.Itoa(busy.Addr().(*net.TCPAddr).Port) + ":" + testConfig
			err = newTestInjector(t).LoadAgent(context.Background(), j, testAgentJar, opts)
			select {
			case <-jv.Exited():
			case <-time.After(20 * time.Second):
				t.Fatalf("JVM survived an agent that could not bind; output:\n%s", jv.Output())
			}
			if ReasonOf(err) != ReasonProcessGone || !strings.Contains(err.Error(), "ended during the attach conversation") {
				t.Fatalf("LoadAgent: %v (reason %s), want %s", err, ReasonOf(err), ReasonProcessGone)
			}
		})
	}
}

func TestDisableAttachMechanismGivesClearError(t *testing.T) {
	t.Parallel()
	needJava(t)
	cases := []struct {
		name string
		opts jvmtest.Options
	}{
		{"command line", jvmtest.Options{App: testApp, JVMArgs: []string{"-XX:+DisableAttachMechanism"}}},
		{"JAVA_TOOL_OPTIONS", jvmtest.Options{App: testApp, Env: []string{"JAVA_TOOL_OPTIONS=-XX:+DisableAttachMechanism"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			jv := jvmtest.StartJVM(t, tc.opts)
			in := newTestInjector(t, WithTargetDir(testTargetDir(t)))
			res := in.Inject(context.Background(), jv.Pid, loopbackAgent(freePort(t)))
			if res.Reason != ReasonAttachDisabled || !strings.Contains(res.Message, "DisableAttachMechanism") {
				t.Fatalf("inject: %+v, want %s naming the flag", res, ReasonAttachDisabled)
			}
			assertUntouched(t, jv)
			// LoadAgent, which skips Inject's checks, refuses as well.
			j, err := Inspect(jv.Pid)
			if err != nil {
				t.Fatal(err)
			}
			if err := in.LoadAgent(context.Background(), j, testAgentJar, "1:/x"); ReasonOf(err) != ReasonAttachDisabled {
				t.Fatalf("LoadAgent: %v, want %s", err, ReasonAttachDisabled)
			}
			assertUntouched(t, jv)
		})
	}
}

// TestAttachDisabledJVMTimesOutWithoutDying covers a JVM that disabled attach in a way Inspect cannot see (the
// flag in a file given with -XX:Flags): the attach times out and the JVM survives the SIGQUIT.
func TestAttachDisabledJVMTimesOutWithoutDying(t *testing.T) {
	t.Parallel()
	needJava(t)
	flags := filepath.Join(t.TempDir(), "flags")
	if err := os.WriteFile(flags, []byte("+DisableAttachMechanism\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(flags), 0o755); err != nil {
		t.Fatal(err)
	}
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp, JVMArgs: []string{"-XX:Flags=" + flags}})
	in := newTestInjector(t, WithAttachTimeout(2*time.Second), WithTargetDir(testTargetDir(t)))
	res := in.Inject(context.Background(), jv.Pid, loopbackAgent(freePort(t)))
	if res.Reason != ReasonAttachTimeout || !strings.Contains(res.Message, "attach disabled") {
		t.Fatalf("inject: %+v, want %s", res, ReasonAttachTimeout)
	}
	if !jv.Alive() {
		t.Fatalf("JVM died: %s", jv.Output())
	}
}

func TestAgentStartFailureMapsToClearError(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv, j := startInspected(t)
	err := newTestInjector(t).LoadAgent(context.Background(), j, testAgentJar, jvmtest.AgentFailArg)
	var ae *AttachError
	if !errors.As(err, &ae) || ae.Reason != ReasonAgentStartFailed || ae.ReturnCode != ReturnStartFailed {
		t.Fatalf("LoadAgent: %v, want %s with return code %d", err, ReasonAgentStartFailed, ReturnStartFailed)
	}
	if !jv.Alive() {
		t.Fatalf("JVM died: %s", jv.Output())
	}
}

func TestLoadAgentJarWithoutAgentClassMapsToClearError(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv, j := startInspected(t)
	err := newTestInjector(t).LoadAgent(context.Background(), j, "/nonexistent/agent.jar", "")
	if ReasonOf(err) != ReasonAgentJarInvalid || !strings.Contains(err.Error(), "Agent-Class") {
		t.Fatalf("LoadAgent: %v, want %s", err, ReasonAgentJarInvalid)
	}
	if !jv.Alive() {
		t.Fatalf("JVM died: %s", jv.Output())
	}
}

func TestLoadAgentRejectsOverlongArgumentBeforeSignalling(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv, j := startInspected(t)
	err := newTestInjector(t).LoadAgent(context.Background(), j, testAgentJar, strings.Repeat("x", MaxArgLength))
	if ReasonOf(err) != ReasonArgsTooLong {
		t.Fatalf("LoadAgent: %v, want %s", err, ReasonArgsTooLong)
	}
	assertUntouched(t, jv)
}

func TestInjectIntoJVMRunningAsOtherUser(t *testing.T) {
	t.Parallel()
	needJava(t)
	const uid, gid = 65534, 65534
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp, Credential: &syscall.Credential{Uid: uid, Gid: gid}})
	j, err := Inspect(jv.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if j.UID != uid || j.GID != gid {
		t.Fatalf("JVM runs as %d:%d, want %d:%d", j.UID, j.GID, uid, gid)
	}
	port := freePort(t)
	dir := testTargetDir(t)
	res := newTestInjector(t, WithTargetDir(dir)).Inject(context.Background(), jv.Pid, loopbackAgent(port))
	requireOK(t, res)
	assertCopiesOwnedBy(t, agentDirOf(t, res, dir), uid, gid)
	scrapeHeap(t, jv.Pid, port)
	// The credential switch stayed on its own thread and was undone: every thread is still root.
	allThreadsHaveCreds(t, 0, 0)
}

func TestInjectIntoJVMInOwnNamespaces(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp, PrivateNamespaces: true})
	j, err := Inspect(jv.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if j.NSPID != 1 || j.PID == j.NSPID {
		t.Fatalf("pid %d nspid %d: want nspid 1 in a new PID namespace", j.PID, j.NSPID)
	}
	port := freePort(t)
	res := newTestInjector(t).Inject(context.Background(), jv.Pid, loopbackAgent(port))
	requireOK(t, res)
	dir := agentDirOf(t, res, DefaultTargetDir)
	if res.NSPID != 1 || filepath.Base(res.AgentPath) != jvmtest.AgentJarName {
		t.Errorf("result: %+v", res)
	}
	// The files landed in the JVM's private /tmp (the work dir on the host), not in the host's /tmp.
	if _, err := os.Stat(filepath.Join(jv.WorkDir, filepath.Base(dir), jvmtest.AgentJarName)); err != nil {
		t.Errorf("agent jar not in the JVM's /tmp: %v", err)
	}
	if _, err := os.Stat(filepath.Join(jv.WorkDir, ".java_pid1")); err != nil {
		t.Errorf("attach socket not in the JVM's /tmp: %v", err)
	}
	scrapeHeap(t, jv.Pid, port)
	again := newTestInjector(t).Inject(context.Background(), jv.Pid, loopbackAgent(port))
	if again.Status != OutcomeAlreadyInjected {
		t.Errorf("second inject: %+v", again)
	}
}

// TestInjectIntoNewestJDK attaches to the newest JDK 21 or later installed under /usr/lib/jvm, which answers in
// the JDK 21+ reply layout. Debian bookworm packages only JDK 17, so a machine without a newer JDK skips this
// test; TestParseReplyRecognisesEachJDKFormat covers that layout from recorded replies on every machine.
func TestInjectIntoNewestJDK(t *testing.T) {
	t.Parallel()
	needJava(t)
	java, version := newestJDK(t, 21)
	if java == "" {
		t.Skip("no JDK 21 or later under /usr/lib/jvm (install one, for example Temurin, to run this test)")
	}
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp, Java: java})
	port := freePort(t)
	res := newTestInjector(t, WithTargetDir(testTargetDir(t))).Inject(context.Background(), jv.Pid, loopbackAgent(port))
	requireOK(t, res)
	if res.JavaVersion != version {
		t.Errorf("JavaVersion = %q, want %q", res.JavaVersion, version)
	}
	scrapeHeap(t, jv.Pid, port)
}

// newestJDK returns the java binary and version of the newest JDK of at least feature release min under
// /usr/lib/jvm, or "" when there is none.
func newestJDK(t *testing.T, min int) (java, version string) {
	t.Helper()
	return jvmtest.NewestJDK(min)
}

// TestStaleAttachSocketIsReplaced covers a .java_pid file left by an earlier process with the same pid: nobody
// listens on it, so it is replaced by starting the JVM's listener.
func TestStaleAttachSocketIsReplaced(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp})
	stale := "/tmp/.java_pid" + strconv.Itoa(jv.Pid)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	t.Cleanup(func() { os.Remove(stale) })
	port := freePort(t)
	requireOK(t, newTestInjector(t, WithTargetDir(testTargetDir(t))).Inject(context.Background(), jv.Pid, loopbackAgent(port)))
	scrapeHeap(t, jv.Pid, port)
}

// TestInjectIntoJVMInOwnNetworkNamespace checks that the port pre-check and the HTTP check look at the JVM's
// network namespace, not this process's: a port busy here is free there, and the agent is reached from inside.
func TestInjectIntoJVMInOwnNetworkNamespace(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp, PrivateNamespaces: true, PrivateNetwork: true})
	busyHere, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busyHere.Close()
	port := busyHere.Addr().(*net.TCPAddr).Port
	res := newTestInjector(t).Inject(context.Background(), jv.Pid, loopbackAgent(port))
	requireOK(t, res)
	scrapeHeap(t, jv.Pid, port)
	// Now the port is busy in the JVM's namespace too: a second agent would not start.
	if listening, err := PortListening(jv.Pid, port); err != nil || !listening {
		t.Fatalf("PortListening in the JVM's namespace = %v, %v", listening, err)
	}
}

// TestXrsJVMIsInjectedThroughItsStartupListener covers -Xrs (ReduceSignalUsage): such a JVM has no SIGQUIT
// handler, so a SIGQUIT would kill it, but it starts its attach listener at startup instead, and the agent is
// loaded through that socket without any signal. Only when the socket is gone (a cleaned /tmp) is the JVM
// refused, with sigquit-not-handled, and it lives on.
func TestXrsJVMIsInjectedThroughItsStartupListener(t *testing.T) {
	t.Parallel()
	needJava(t)
	for _, jdk := range testJDKs(t) {
		t.Run(jdk.name, func(t *testing.T) {
			t.Parallel()
			opts := jvmtest.Options{App: testApp, Java: jdk.java, JVMArgs: []string{"-Xrs", "-Xmx64m"}}
			jv := jvmtest.StartJVM(t, opts)
			j, err := Inspect(jv.Pid)
			if err != nil {
				t.Fatal(err)
			}
			if st, err := readStatus(jv.Pid); err != nil || st.CatchesSignal(int(syscall.SIGQUIT)) {
				t.Fatalf("-Xrs JVM handles SIGQUIT (%v): the test needs one that does not", err)
			}
			if !attachSocketExists(t, j) {
				t.Fatal("-Xrs JVM has no attach socket after startup")
			}
			port := freePort(t)
			requireOK(t, newTestInjector(t, WithTargetDir(testTargetDir(t))).Inject(context.Background(), jv.Pid, loopbackAgent(port)))
			scrapeHeap(t, jv.Pid, port)

			bare := jvmtest.StartJVM(t, opts)
			sock := filepath.Join("/tmp", ".java_pid"+strconv.Itoa(bare.Pid))
			if err := os.Remove(sock); err != nil {
				t.Fatal(err)
			}
			parent := testTargetDir(t)
			res := newTestInjector(t, WithTargetDir(parent)).Inject(context.Background(), bare.Pid, loopbackAgent(freePort(t)))
			if res.Reason != ReasonSignalNotHandled {
				t.Fatalf("inject without the socket: %+v, want %s", res, ReasonSignalNotHandled)
			}
			if entries, _ := os.ReadDir(parent); len(entries) != 0 {
				t.Errorf("%s received %v: the refusal should come before the copy", parent, entries)
			}
			time.Sleep(300 * time.Millisecond) // a deliberate pause, not a wait: a stray SIGQUIT would have ended it by now
			if !jv.Alive() || !bare.Alive() {
				t.Fatalf("a JVM died: %s\n%s", jv.Output(), bare.Output())
			}
		})
	}
}
