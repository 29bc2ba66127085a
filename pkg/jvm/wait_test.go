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
		_ = os.Remove(filepath.Join("/tmp", markerPrefix+itoa(pid)+lockSuffix))
		m, _ := filepath.Glob("/tmp/hsperfdata_*/" + itoa(pid))
		for _, f := range m {
			_ = os.Remove(f)
		}
	})
	return cmd.Process.Pid
}

// TestWaitInjectsAJVMTheMomentItIsSafe starts a JVM and injects the real jmx_exporter into it at once, with
// WithWait and no minimum age: Inject waits for the launcher to load libjvm.so and for HotSpot's SIGQUIT
// handler, then loads the agent, and the JVM lives on with /metrics answering.
func TestWaitInjectsAJVMTheMomentItIsSafe(t *testing.T) {
	t.Parallel()
	needJava(t)
	jar := exporterJar(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(exporterConfigA), 0o644); err != nil {
		t.Fatal(err)
	}
	in := newTestInjector(t, WithTargetDir(testTargetDir(t)), WithWait(60*time.Second))
	port := freePort(t)
	pid := startRawJVM(t, "java")
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
