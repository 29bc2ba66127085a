package jvm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// startRawJVM starts the sample application without waiting for anything, as a container runtime starts a
// JVM, and returns its pid; the JVM is killed at cleanup.
func startRawJVM(t testing.TB, java string) int {
	t.Helper()
	work := t.TempDir()
	cmd := exec.Command(java, "-Xmx64m", "-cp", testApp.Jar, testApp.MainClass)
	cmd.Dir = work
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	exited, err := startChild(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		pid := cmd.Process.Pid
		for _, f := range []string{".java_pid", ".attach_pid"} {
			_ = os.Remove(filepath.Join("/tmp", f+itoa(pid)))
		}
		_ = os.Remove(filepath.Join("/tmp", markerPrefix+itoa(pid)+".json"))
		locks, _ := filepath.Glob(filepath.Join("/tmp", markerPrefix+itoa(pid)+"-*"+lockSuffix))
		for _, f := range locks {
			_ = os.Remove(f)
		}
		m, _ := filepath.Glob("/tmp/hsperfdata_*/" + itoa(pid))
		for _, f := range m {
			_ = os.Remove(f)
		}
	})
	return cmd.Process.Pid
}

// TestWaitInjectsAJVMTheMomentItIsSafe starts JVMs and injects the project's agent into each at once, with
// WithWait and no minimum age, on JDK 17 and the newest JDK: Inject waits for the launcher to load libjvm.so and
// for HotSpot's SIGQUIT handler, loads the agent (asking again while the JVM refuses because it has not
// finished starting), and the JVM lives on with /metrics answering.
func TestWaitInjectsAJVMTheMomentItIsSafe(t *testing.T) {
	t.Parallel()
	needJava(t)
	jar := shippedAgentJar(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(exporterConfigA), 0o644); err != nil {
		t.Fatal(err)
	}
	jdks := map[string]string{"default": "java"}
	if java, version := jvmtest.NewestJDK(18); java != "" {
		jdks["jdk"+strings.SplitN(version, ".", 2)[0]] = java
	}
	for name, java := range jdks {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := newTestInjector(t, WithTargetDir(testTargetDir(t)), WithWait(60*time.Second))
			for range 3 {
				port := freePort(t)
				pid := startRawJVM(t, java)
				res := in.Inject(context.Background(), pid, Agent{Jar: jar, Config: cfg, Port: port, Host: "127.0.0.1"})
				requireOK(t, res)
				body := scrapeReal(t, pid, port)
				if !strings.Contains(body, "jvm_memory_used_bytes") {
					t.Fatalf("scrape:\n%s", head(body, 2000))
				}
				if err := syscall.Kill(pid, 0); err != nil {
					t.Fatalf("JVM %d died: %v", pid, err)
				}
			}
		})
	}
}

func TestTooEarlyIsOnlyTheRefusalOfAStartingJVM(t *testing.T) {
	cases := map[string]bool{
		"-1\njava.lang.NullPointerException\n":                                   true,
		"-1\njava.lang.NullPointerException: Cannot invoke \"x\" because null\n": true,
		"0\nreturn code: 102\n":                                                  false,
		"-1\nDynamic agent loading is not enabled.\n":                            false,
		"0\njava.lang.NullPointerException\n":                                    false,
	}
	for raw, want := range cases {
		r, err := ParseReply("load", []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		if got := tooEarly(r); got != want {
			t.Errorf("tooEarly(%q) = %v, want %v", raw, got, want)
		}
	}
}

// TestWaitGivesUpOnAProcessThatNeverBecomesAJVM: --wait bounds the wait for a pid to become a JVM.
func TestWaitGivesUpOnAProcessThatNeverBecomesAJVM(t *testing.T) {
	t.Parallel()
	sleep := exec.Command("sleep", "60")
	exited, err := startChild(sleep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleep.Process.Kill(); <-exited })
	in := newTestInjector(t, WithWait(300*time.Millisecond))
	start := time.Now()
	res := in.Inject(context.Background(), sleep.Process.Pid, Agent{Jar: "x.jar", Config: "c.yaml", Port: 9404})
	if res.Reason != ReasonNotJVM || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("result %+v after %s, want %s after the wait", res, time.Since(start), ReasonNotJVM)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
