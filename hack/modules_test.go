package hack

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// moduleVersionExceptions are the modules a test-only module may take at
// another version than the main module, and why: Helm 4.3.1 requires
// Kubernetes' 0.37 libraries, the main module (and the kube binaries
// testenv runs) are at 0.36.
var moduleVersionExceptions = map[string][]string{
	"test/helm": {"k8s.io/api", "k8s.io/apiextensions-apiserver", "k8s.io/apimachinery", "k8s.io/client-go"},
}

// TestModulesShareDependencyVersions keeps the test-only modules (bench,
// test/monitoring, test/helm) on the main module's versions of every module
// both compile: make test builds all of them with the same flags (-race
// -trimpath), and a package compiled once is reused by the others only when
// it and everything below it are the same version. One differing module low
// in the graph (golang.org/x/sys, say) makes everything above it compile
// again on a cold machine: test/monitoring's commands took 227 CPU seconds
// after the main module's packages when it differed from the main module in
// 29 modules, 45 with none. After `go get` in any of these modules, raise
// the lower side to the higher version (go get module@version) and run go
// mod tidy in each.
func TestModulesShareDependencyVersions(t *testing.T) {
	root := repoRoot(t)
	main := builtModules(t, root)
	for _, m := range []string{"bench", "test/monitoring", "test/helm"} {
		except := moduleVersionExceptions[m]
		var diffs []string
		for path, version := range builtModules(t, filepath.Join(root, m)) {
			want, ok := main[path]
			if !ok || want == version || slices.Contains(except, path) || strings.HasPrefix(path, "github.com/handlerkit/handlerkit") {
				continue
			}
			diffs = append(diffs, path+" "+version+" (main module: "+want+")")
		}
		slices.Sort(diffs)
		if len(diffs) > 0 {
			t.Errorf("%s compiles %d modules at other versions than the main module, so make test compiles their packages "+
				"and every package above them twice on a cold machine; align them (the higher version on both sides):\n  %s",
				m, len(diffs), strings.Join(diffs, "\n  "))
		}
	}
}

// builtModules maps each module that provides a package the tests of the
// module in dir compile (not just one in its module graph) to its version.
func builtModules(t *testing.T, dir string) map[string]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-test", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}", "./...")
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v", dir, err)
	}
	mods := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if path, version, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			mods[path] = version
		}
	}
	return mods
}
