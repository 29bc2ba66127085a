package hack

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

// probeModule is a module of one package whose test records where its test
// binary runs from (the -o directory test-lanes.sh chose), leaves a process
// behind (as a test that forgets a child would), and, when told to, waits
// for a file before it ends, so that another run can start meanwhile.
const probeModule = `module example.com/probe

go 1.26.0
`

const probeTest = `package probe

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestRecordWhereIRun(t *testing.T) {
	dir := os.Getenv("PROBE_DIR")
	name := os.Getenv("PROBE_NAME")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A process left behind, holding whatever descriptors it inherited.
	sleep := exec.Command("sleep", "120")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".orphan"), []byte(strconv.Itoa(sleep.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".exe"), []byte(exe), 0o644); err != nil {
		t.Fatal(err)
	}
	if release := os.Getenv("PROBE_RELEASE"); release != "" {
		for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if _, err := os.Stat(release); err == nil {
				return
			}
		}
		t.Fatal("never released")
	}
}
`

// TestTestBinariesDirectoryIsLocked runs hack/test-lanes.sh on a module of
// one package three times with one TESTBIN: the first run holds the lock
// while its test waits, then keeps its test binary in TESTBIN; a second run
// started meanwhile links into a directory of its own, says so, and removes
// that directory at its end; a third run after the first uses TESTBIN again,
// although the first run's test left a process behind (the lanes close the
// lock's descriptor before they start any test), and runs the first's
// binary from there without linking it again.
func TestTestBinariesDirectoryIsLocked(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatalf("test-lanes.sh needs flock (util-linux): %v", err)
	}
	root := repoRoot(t)
	work := t.TempDir()
	module := filepath.Join(work, "module")
	for name, content := range map[string]string{
		"go.mod":               probeModule,
		"probe/probe_test.go":  probeTest,
		"hack/test-lanes.sh":   "",
		"probe/doc.go":         "// Package probe is test-lanes.sh's test subject.\npackage probe\n",
		"unlisted/unlisted.go": "// Package unlisted has no tests.\npackage unlisted\n",
	} {
		path := filepath.Join(module, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if name == "hack/test-lanes.sh" {
			script, err := os.ReadFile(filepath.Join(root, "hack", "test-lanes.sh"))
			if err != nil {
				t.Fatal(err)
			}
			content = string(script)
		}
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	probeDir := filepath.Join(work, "probe")
	testbin := filepath.Join(work, "testbin")
	tmp := filepath.Join(work, "tmp")
	for _, d := range []string{probeDir, tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { killOrphans(t, probeDir) })

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	lanes := func(name, release string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(module, "hack", "test-lanes.sh"))
		cmd.Dir = module
		cmd.Env = append(os.Environ(),
			"GO=go", "MAKE=true", "TESTFLAGS=-count=1", "PKGS=./...", "NODE_PKGS=", "LONG_PKGS=",
			"MODULES=", "REST_P=1", "TESTBIN="+testbin, "TMPDIR="+tmp, "LOGDIR="+filepath.Join(work, "log-"+name),
			"GOFLAGS=-mod=mod", "GOWORK=off", "PROBE_DIR="+probeDir, "PROBE_NAME="+name, "PROBE_RELEASE="+release)
		cmd.WaitDelay = 10 * time.Second
		return cmd
	}

	release := filepath.Join(work, "release")
	first := lanes("first", release)
	var firstOut strings.Builder
	first.Stdout, first.Stderr = &firstOut, &firstOut
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Wait() }()
	// The first run's test is running (and its binary linked) once it has
	// written where it runs from.
	waitForFile(t, filepath.Join(probeDir, "first.exe"), firstDone, &firstOut)

	second, err := lanes("second", "").CombinedOutput()
	if err != nil {
		t.Fatalf("second run, while the first holds TESTBIN: %v\n%s", err, second)
	}
	if !strings.Contains(string(second), testbin+" is in use by another run") {
		t.Errorf("the second run does not say that TESTBIN is in use:\n%s", second)
	}
	// go test -o copies a binary into its directory after the test ran, so
	// while the first run's test waits, nothing may be in TESTBIN yet: a
	// probe.test there came from the second run.
	kept := filepath.Join(testbin, "rest-1", "probe.test")
	if _, err := os.Stat(kept); err == nil {
		t.Errorf("the second run put its test binary into TESTBIN (%s), which the first run holds", kept)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(tmp, "handlerkit-testbin.*")); len(leftovers) != 0 {
		t.Errorf("the second run left its own binaries directory behind: %v", leftovers)
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-firstDone; err != nil {
		t.Fatalf("first run: %v\n%s", err, firstOut.String())
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("the first run did not keep its test binary in TESTBIN: %v", err)
	}
	// The first run's test left a sleep behind; it must not hold the lock.
	if pid := readFile(t, filepath.Join(probeDir, "first.orphan")); !processAlive(pid) {
		t.Fatalf("the process the first run left behind (pid %s) is gone already; the check below would prove nothing", pid)
	}
	third, err := lanes("third", "").CombinedOutput()
	if err != nil {
		t.Fatalf("third run: %v\n%s", err, third)
	}
	if strings.Contains(string(third), "is in use by another run") {
		t.Errorf("the third run, after the first ended, found TESTBIN in use (a process the first left behind holds the lock?):\n%s", third)
	}
	// Up to date, the binary runs from TESTBIN itself (no link).
	if thirdExe := readFile(t, filepath.Join(probeDir, "third.exe")); thirdExe != kept {
		t.Errorf("the third run's test binary ran from %s, want the one the first run kept, %s", thirdExe, kept)
	}
}

// waitForFile waits until path exists with some content, failing t if the
// run (done) ends first.
func waitForFile(t *testing.T, path string, done <-chan error, out *strings.Builder) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the first run ended before its test started: %v\n%s", err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("no %s within 5 minutes", path)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// processAlive reports whether the process with the pid (decimal) exists.
func processAlive(pid string) bool {
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return false
	}
	return syscall.Kill(n, 0) == nil
}

// killOrphans kills the processes the probe's tests left behind.
func killOrphans(t *testing.T, dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.orphan"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if n, err := strconv.Atoi(string(b)); err == nil && n > 0 {
			if err := syscall.Kill(n, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
				t.Logf("kill %d: %v", n, err)
			}
		}
	}
}
