package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// dropAll is the setpriv prefix that runs a command as uid:gid with every capability set empty (bounding,
// effective, permitted, inheritable, ambient) and no_new_privs, as an ephemeral container under Pod Security
// "restricted" runs.
func dropAll(t *testing.T, uid, gid int) []string {
	t.Helper()
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) is required: %v", err)
	}
	return []string{setpriv, "--reuid", strconv.Itoa(uid), "--regid", strconv.Itoa(gid), "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"}
}

// assertNoCapabilities checks that the dropAll prefix really leaves a process without capabilities.
func assertNoCapabilities(t *testing.T, prefix []string) {
	t.Helper()
	out, stderr, code := runCommand(t, append(prefix, "cat", "/proc/self/status")...)
	if code != 0 {
		t.Fatalf("cat under setpriv: exit %d: %s", code, stderr)
	}
	for _, f := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if !strings.Contains(out, f+":\t0000000000000000") {
			t.Fatalf("%s is not empty under %v:\n%s", f, prefix, out)
		}
	}
	if !strings.Contains(out, "NoNewPrivs:\t1") {
		t.Fatalf("no_new_privs is not set under %v", prefix)
	}
}

func bundle(t *testing.T, jarFile, configFile string) []byte {
	t.Helper()
	var jarData []byte
	if jarFile != "" {
		var err error
		if jarData, err = os.ReadFile(jarFile); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := jvm.WriteBundle(&buf, jarData, cfg); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// removeCopies removes, after the test, the agent directory an injection into the host's /tmp created.
func removeCopies(t *testing.T, res jvm.InjectResult) {
	t.Helper()
	if dir := filepath.Dir(res.AgentPath); strings.HasPrefix(filepath.Base(dir), jvm.AgentDirPrefix) {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
}

// shippedAgentCopy returns a copy, that every user can read, of the project's agent jar (jvmtest.AgentJar), the
// one the image ships.
func shippedAgentCopy(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	jar, err := jvmtest.AgentJar(ctx)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(jar)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "jmx-attach-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(dir, filepath.Base(jar))
	if err := os.WriteFile(copied, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return copied
}

// TestInjectUnprivilegedAsTheJVMsUser runs jmx-attach as the JVM's uid and gid with no capabilities and
// no_new_privs, as an ephemeral container under Pod Security "restricted" or pods/exec in the JVM's container
// would: inject the shipped agent with the jar and config streamed on stdin (--bundle-stdin), then
// reconfigure it with the config from the environment (--config-env), which the agent reports applied, then
// the same config again (unchanged).
func TestInjectUnprivilegedAsTheJVMsUser(t *testing.T) {
	t.Parallel()
	const uid, gid = 65534, 65534
	prefix := dropAll(t, uid, gid)
	assertNoCapabilities(t, prefix)
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: app, Credential: &syscall.Credential{Uid: uid, Gid: gid}})
	port := freePort(t)
	argv := append(append([]string{}, prefix...), binary, "inject", "--bundle-stdin", "--port", strconv.Itoa(port),
		"--host", "127.0.0.1", "--pid", strconv.Itoa(jv.Pid), "--min-age", "0s", "--json", "--termination-log", "")
	out, stderr, code := runWith(t, bundle(t, shippedAgentCopy(t), config), nil, argv...)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s\njvm: %s", code, out, stderr, jv.Output())
	}
	res := parseLines(t, out)[0]
	removeCopies(t, res)
	if res.Status != jvm.OutcomeOK || filepath.Base(res.AgentPath) != jvm.BundleAgentJar || filepath.Base(res.ConfigPath) != jvm.BundleConfig ||
		!strings.Contains(res.Message, "config SHA-256") {
		t.Fatalf("result %+v", res)
	}
	var st syscall.Stat_t
	dir := filepath.Join("/proc", strconv.Itoa(jv.Pid), "root", filepath.Dir(res.AgentPath))
	if err := syscall.Stat(dir, &st); err != nil || st.Uid != uid || st.Gid != gid || st.Mode&0o7777 != 0o700 {
		t.Fatalf("copies directory %s: %v, uid %d gid %d mode %o", dir, err, st.Uid, st.Gid, st.Mode&0o7777)
	}
	body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if !strings.Contains(body, "java_lang_Memory_HeapMemoryUsage_used") {
		t.Fatalf("metrics of the agent: %s", body)
	}

	newConfig := "lowercaseOutputName: true\nrules:\n- pattern: \".*\"\n"
	env := []string{"JMX_CONFIG=" + newConfig}
	reconf := append(append([]string{}, prefix...), binary, "reconfigure", "--config-env", "JMX_CONFIG",
		"--pid", strconv.Itoa(jv.Pid), "--json", "--termination-log", "")
	out, stderr, code = runWith(t, nil, env, reconf...)
	if code != exitOK {
		t.Fatalf("reconfigure: exit %d\nstdout: %s\nstderr: %s", code, out, stderr)
	}
	rc := parseLines(t, out)[0]
	if rc.Status != jvm.OutcomeOK || rc.Port != port || rc.ConfigPath != res.ConfigPath || !strings.Contains(rc.Message, "serves it") {
		t.Fatalf("reconfigure: %+v", rc)
	}
	if got, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(jv.Pid), "root", rc.ConfigPath)); string(got) != newConfig {
		t.Fatalf("config file after reconfigure: %q", got)
	}
	// The agent reported serving the new config: the next scrape uses it.
	body = httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if !strings.Contains(body, "java_lang_memory_heapmemoryusage_used") {
		t.Fatalf("the new config is not in effect:\n%s", body)
	}
	out, _, code = runWith(t, nil, env, reconf...)
	if code != exitOK || parseLines(t, out)[0].Status != jvm.OutcomeUnchanged {
		t.Fatalf("reconfigure again: exit %d: %s", code, out)
	}
	if !jv.Alive() {
		t.Fatalf("JVM died: %s", jv.Output())
	}
}

// TestInjectUnprivilegedRootIntoRootJVM runs jmx-attach as uid 0 with every capability dropped: it injects a
// root JVM that has no capabilities either, and refuses, with a reason naming what is missing and without
// touching it, a root JVM that has capabilities jmx-attach lacks (the kernel does not let it read that JVM's
// /proc entries).
func TestInjectUnprivilegedRootIntoRootJVM(t *testing.T) {
	t.Parallel()
	prefix := dropAll(t, 0, 0)
	assertNoCapabilities(t, prefix)
	wrapper := filepath.Join(t.TempDir(), "java-without-caps")
	script := "#!/bin/sh\nexec " + strings.Join(prefix, " ") + " java \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	capless := jvmtest.StartJVM(t, jvmtest.Options{App: app, Java: wrapper})
	full := jvmtest.StartJVM(t, jvmtest.Options{App: app})

	port := freePort(t)
	env := []string{"JMX_CONFIG=rules:\n- pattern: \".*\"\n"}
	inject := func(pid, port int) (string, string, int) {
		return runWith(t, nil, env, append(append([]string{}, prefix...), binary, "inject", "--agent", agentJar,
			"--config-env", "JMX_CONFIG", "--port", strconv.Itoa(port), "--host", "127.0.0.1", "--pid", strconv.Itoa(pid),
			"--min-age", "0s", "--json", "--target-dir", targetDir(t), "--termination-log", "")...)
	}
	out, stderr, code := inject(capless.Pid, port)
	if code != exitOK {
		t.Fatalf("capability-less root JVM: exit %d\nstdout: %s\nstderr: %s\njvm: %s", code, out, stderr, capless.Output())
	}
	if res := parseLines(t, out)[0]; res.Status != jvm.OutcomeOK {
		t.Fatalf("result %+v", res)
	}
	if body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port)); !strings.Contains(body, `jvm_memory_bytes_used{area="heap"}`) {
		t.Fatalf("metrics: %s", body)
	}

	out, stderr, code = inject(full.Pid, freePort(t))
	if code != exitFailed {
		t.Fatalf("root JVM with capabilities: exit %d, want %d\nstdout: %s\nstderr: %s", code, exitFailed, out, stderr)
	}
	res := parseLines(t, out)[0]
	if res.Reason != jvm.ReasonAccessDenied || !strings.Contains(res.Message, "SYS_ADMIN") {
		t.Fatalf("result %+v, want %s naming the missing capabilities", res, jvm.ReasonAccessDenied)
	}
	if jvmtest.AttachListenerStarted(full.Pid) || !full.Alive() {
		t.Fatalf("JVM was signalled (socket exists) or died (alive=%v)", full.Alive())
	}
}

// TestConcurrentInjectProcessesLoadTheAgentOnce runs two jmx-attach processes against one JVM at the same time,
// as two operator replicas would: exactly one loads the agent, the other reports already-injected.
func TestConcurrentInjectProcessesLoadTheAgentOnce(t *testing.T) {
	t.Parallel()
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: app})
	port := freePort(t)
	dir := targetDir(t)
	var wg sync.WaitGroup
	outs := make([]string, 2)
	codes := make([]int, 2)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], _, codes[i] = runBinary(t, "inject", "--agent", agentJar, "--config", config, "--port", strconv.Itoa(port),
				"--host", "127.0.0.1", "--pid", strconv.Itoa(jv.Pid), "--min-age", "0s", "--json", "--target-dir", dir,
				"--termination-log", "")
		}()
	}
	wg.Wait()
	statuses := map[jvm.Outcome]int{}
	for i, out := range outs {
		if codes[i] != exitOK {
			t.Fatalf("inject %d: exit %d: %s", i, codes[i], out)
		}
		statuses[parseLines(t, out)[0].Status]++
	}
	if statuses[jvm.OutcomeOK] != 1 || statuses[jvm.OutcomeAlreadyInjected] != 1 {
		t.Fatalf("results %q: want one ok and one already-injected", outs)
	}
	if n := strings.Count(jv.Output(), "handlerkit test agent: serving /metrics"); n != 1 {
		t.Fatalf("agent started %d times, want once:\n%s", n, jv.Output())
	}
}

func TestInjectWithBadBundleExitsFourAndLeavesJVMAlone(t *testing.T) {
	t.Parallel()
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: app})
	var buf bytes.Buffer
	if err := jvm.WriteBundle(&buf, nil, []byte("rules: []\n")); err != nil { // no agent.jar
		t.Fatal(err)
	}
	out, _, code := runWith(t, buf.Bytes(), nil, binary, "inject", "--bundle-stdin", "--port", strconv.Itoa(freePort(t)),
		"--pid", strconv.Itoa(jv.Pid), "--min-age", "0s", "--json", "--target-dir", targetDir(t), "--termination-log", "")
	if code != exitBadAgent {
		t.Fatalf("exit %d, want %d: %s", code, exitBadAgent, out)
	}
	if res := parseLines(t, out)[0]; res.Reason != jvm.ReasonBundleInvalid || !strings.Contains(res.Message, "agent.jar") {
		t.Fatalf("result %+v", res)
	}
	if jvmtest.AttachListenerStarted(jv.Pid) || !jv.Alive() {
		t.Fatalf("JVM was signalled (socket exists) or died (alive=%v)", jv.Alive())
	}
}

// TestJVMPatternsMatchingNothingExitThree: --jvm patterns that match no JVM end with exit 3 and name the
// patterns; nothing is touched.
func TestJVMPatternsMatchingNothingExitThree(t *testing.T) {
	t.Parallel()
	_, stderr, code := runBinary(t, "inject", "--agent", agentJar, "--config", config, "--port", strconv.Itoa(freePort(t)),
		"--all", "--jvm", "no.such.Main*", "--jvm", "nothing.jar,other.*", "--json", "--termination-log", "")
	if code != exitNoJVM {
		t.Fatalf("exit %d, want %d: %s", code, exitNoJVM, stderr)
	}
	for _, p := range []string{"no.such.Main*", "nothing.jar", "other.*"} {
		if !strings.Contains(stderr, p) {
			t.Errorf("message %q does not name pattern %q", stderr, p)
		}
	}
}

// TestInjectAllWaitsForAJVMThatIsStarting starts a JVM and, at once, with no sleep, runs inject --all --min-age 0
// --wait 60s with the shipped agent, in a PID namespace where the JVM is the only one: jmx-attach
// waits for it to appear and to install its SIGQUIT handler, injects it, and /metrics answers. Only the JVMs
// matching --jvm are taken, and the pattern that matched nothing is named.
func TestInjectAllWaitsForAJVMThatIsStarting(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	exporter, err := jvmtest.AgentJar(ctx)
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	work := podTmp(t)
	data, err := os.ReadFile(exporter)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "exporter.jar"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `set -e
mount --make-rprivate /
mount -t proc proc /proc
mount --bind "$1" /tmp
cd /tmp
java -Xmx64m -cp /tmp/app.jar "$2" >/tmp/jvm.out 2>&1 &
set +e
/tmp/jmx-attach inject --all --jvm 'no.such.*' --jvm "$2" --agent /tmp/exporter.jar --config /tmp/config.yaml \
	--port "$3" --host 127.0.0.1 --min-age 0s --wait 60s --json --termination-log "" >/tmp/results 2>/tmp/stderr
echo $? >/tmp/rc.new && mv /tmp/rc.new /tmp/rc
exec sleep 600`
	cmd := exec.Command("/bin/sh", "-c", script, "sh", work, app.MainClass, strconv.Itoa(port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	rc := waitFile(t, filepath.Join(work, "rc"), 3*time.Minute)
	out, _ := os.ReadFile(filepath.Join(work, "results"))
	errOut, _ := os.ReadFile(filepath.Join(work, "stderr"))
	jvmOut, _ := os.ReadFile(filepath.Join(work, "jvm.out"))
	if strings.TrimSpace(rc) != "0" {
		t.Fatalf("inject --all --wait: exit %s\nstdout: %s\nstderr: %s\njvm: %s", rc, out, errOut, jvmOut)
	}
	res := parseLines(t, string(out))
	if len(res) != 1 || res[0].Status != jvm.OutcomeOK || res[0].Port != port {
		t.Fatalf("results %+v", res)
	}
	if !strings.Contains(string(errOut), "no.such.*") {
		t.Errorf("stderr %q does not name the pattern that matched nothing", errOut)
	}
	body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if !strings.Contains(body, "jvm_memory_used_bytes") {
		t.Fatalf("metrics of the agent: %s", body)
	}
	if time.Since(res[0].StartedAt) > 3*time.Minute {
		t.Errorf("startedAt %s is not the JVM's start", res[0].StartedAt)
	}
}
