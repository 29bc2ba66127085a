package jvm

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
	"github.com/handlerkit/handlerkit/pkg/testenv/freeport"
)

// Built once per test binary, and only when a test needs a JVM: javac takes seconds, and fuzz workers, which run
// TestMain again and again, need none of it.
var (
	testAgentJar string
	testApp      jvmtest.App
	testConfig   string
	buildDir     string
	buildOnce    sync.Once
	buildErr     error
)

const validConfig = `lowercaseOutputName: true
rules:
- pattern: ".*"
`

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// needJava compiles the test agent and sample application on first use.
func needJava(t testing.TB) {
	t.Helper()
	buildOnce.Do(func() { buildErr = buildJava() })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

func buildJava() error {
	dir, err := os.MkdirTemp("", "jvm-test-")
	if err != nil {
		return err
	}
	buildDir = dir
	// JVMs in tests run as other users too; they must reach these files.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if testAgentJar, err = jvmtest.BuildTestAgent(dir); err != nil {
		return err
	}
	if testApp, err = jvmtest.BuildSampleApp(dir); err != nil {
		return err
	}
	testConfig = filepath.Join(dir, "config.yaml")
	return os.WriteFile(testConfig, []byte(validConfig), 0o644)
}

// freePort returns a free loopback TCP port outside the ephemeral range, so
// no outgoing connection can take it before the test binds it.
func freePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newTestInjector returns an injector whose minimum age is zero: StartJVM returns only after the application
// printed its ready line, long after the JVM installed its signal handlers. Tests of the age wait set it.
// Its HTTP check waits up to two minutes rather than DefaultHTTPTimeout's 15 s: a fresh agent's first answer
// took over 10 s on a loaded machine, and no test here is about that timeout.
func newTestInjector(t testing.TB, opts ...Option) *Injector {
	t.Helper()
	in, err := NewInjector(append([]Option{WithMinAge(0), WithAttachTimeout(20 * time.Second), WithHTTPTimeout(2 * time.Minute)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func loopbackAgent(port int) Agent {
	return Agent{Jar: testAgentJar, Config: testConfig, Port: port, Host: "127.0.0.1"}
}

// startInspected starts the test app's JVM and returns it with what Inspect
// reports of it.
func startInspected(t *testing.T) (*jvmtest.JVM, JVM) {
	t.Helper()
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp})
	j, err := Inspect(jv.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return jv, j
}

// startChild starts cmd with SIGKILL as its parent-death signal, so that it dies with the test binary, and
// returns a channel that is closed once cmd has ended and been waited for. The kernel sends the parent-death signal when the thread
// that forked the child ends, not the process, and inNetns ends threads on purpose (any thread, including one
// that forked a child). So cmd is forked from a goroutine that keeps its thread locked until cmd has ended.
func startChild(cmd *exec.Cmd) (<-chan struct{}, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}
