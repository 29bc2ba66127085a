package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/handlerkit/handlerkit/pkg/testenv/testbin"
)

// These tests run this package's test binary as testenv-build (TestMain
// calls main when childEnv is set): the command `make test` and people run.
// They moved here from pkg/testenv's own tests, which run in the lane of
// the packages that start a node, because they start none.

const childEnv = "TESTENV_BUILD_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Args = append([]string{"testenv-build"}, strings.Fields(os.Getenv(childEnv))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testenvBuild runs testenv-build args in dir with env added, and returns
// its stdout and stderr.
func testenvBuild(t *testing.T, dir string, env []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env...), childEnv+"="+strings.Join(args, " "))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// TestNodeBinariesBuildOnceOutsideTheCheckout builds one node binary of each
// build module into empty caches, from a working directory outside the
// checkout, by two testenv-build processes at once: the lock makes it one
// build, and both print where the binaries are.
func TestNodeBinariesBuildOnceOutsideTheCheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kube-scheduler and ctr (seconds with a warm build cache, minutes cold)")
	}
	binDir, ctrDir, work := t.TempDir(), t.TempDir(), t.TempDir()
	env := []string{testbin.EnvBinDir + "=" + binDir, testbin.EnvContainerdDir + "=" + ctrDir}
	names := []string{"kube-scheduler", "ctr"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var progress strings.Builder
	for range 2 {
		wg.Go(func() {
			stdout, stderr, err := testenvBuild(t, work, env, names...)
			mu.Lock()
			defer mu.Unlock()
			progress.WriteString(stderr)
			if err != nil {
				t.Errorf("testenv-build: %v\n%s", err, stderr)
				return
			}
			for name, dir := range map[string]string{"kube-scheduler": binDir, "ctr": ctrDir} {
				if want := name + "\t" + filepath.Join(dir, name) + "\n"; !strings.Contains(stdout, want) {
					t.Errorf("stdout %q lacks %q", stdout, want)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Log(progress.String())
	for _, name := range names {
		if n := strings.Count(progress.String(), "testenv: building "+name+" "); n != 1 {
			t.Errorf("%s was built %d times, want once", name, n)
		}
	}
	want := map[string]string{
		filepath.Join(binDir, "kube-scheduler"): "Kubernetes " + testbin.KubeVersion,
		filepath.Join(ctrDir, "ctr"):            "ctr github.com/containerd/containerd/v2 " + testbin.ContainerdVersion,
	}
	for path, version := range want {
		out, err := exec.Command(path, "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), version) {
			t.Errorf("%s --version: %v %q, want %q", path, err, out, version)
		}
	}
	// Only the binary and the build lock: no build module, no partial output.
	for dir, name := range map[string]string{binDir: "kube-scheduler", ctrDir: "ctr"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != name && e.Name() != ".build.lock" {
				t.Errorf("%s holds %s, left by a build", dir, e.Name())
			}
		}
	}
}

// TestDownloadBinarySourcesBuildsNothing: `testenv-build -download`, the
// download step of `make test`, resolves a missing binary's packages (so
// its modules are in the module cache) and leaves the cache directory as it
// was; an unknown name is an error.
func TestDownloadBinarySourcesBuildsNothing(t *testing.T) {
	dir := t.TempDir()
	env := []string{testbin.EnvBinDir + "=" + dir}
	if _, stderr, err := testenvBuild(t, t.TempDir(), env, "-download", "etcd"); err != nil {
		t.Fatalf("testenv-build -download etcd: %v\n%s", err, stderr)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("the cache directory after a download: %v %v, want it empty", entries, err)
	}
	if _, stderr, err := testenvBuild(t, t.TempDir(), env, "-download", "no-such-binary"); err == nil || !strings.Contains(stderr, "no binary named") {
		t.Errorf("an unknown binary: %v %q", err, stderr)
	}

	// On a cold module cache the go command prints "go: downloading" lines
	// on stderr; they are progress, not errors (a fresh machine's `make
	// test` failed on them once). The cold cache is an empty GOMODCACHE
	// fed by a proxy on the files of the warm one, which the download
	// above filled.
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	warm := filepath.Join(strings.TrimSpace(string(out)), "cache", "download")
	cold := t.TempDir()
	t.Cleanup(func() { // module cache files are read-only; go clean removes them
		cmd := exec.Command("go", "clean", "-modcache")
		cmd.Env = append(os.Environ(), "GOMODCACHE="+cold)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("go clean -modcache: %v\n%s", err, out)
		}
	})
	coldEnv := append(env, "GOMODCACHE="+cold, "GOPROXY=file://"+warm, "GOSUMDB=off")
	if _, stderr, err := testenvBuild(t, t.TempDir(), coldEnv, "-download", "etcd"); err != nil {
		t.Fatalf("a download into a cold module cache: %v\n%s", err, stderr)
	}
	if entries, err := os.ReadDir(filepath.Join(cold, "cache", "download")); err != nil || len(entries) == 0 {
		t.Errorf("the cold module cache after a download: %v %v, want modules", entries, err)
	}
}
