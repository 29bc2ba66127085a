package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// KubeVersion is the Kubernetes release whose binaries the Environment runs.
const KubeVersion = "v1.36.3"

// EnvBinDir names the environment variable that overrides where the
// control-plane binaries are looked up.
const EnvBinDir = "HANDLERKIT_BIN_DIR"

// BinDir returns the directory that holds (or will hold) the control-plane
// binaries: $HANDLERKIT_BIN_DIR, else the per-user cache.
func BinDir() string {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		return dir
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "handlerkit", "controlplane", KubeVersion)
}

// buildMu serialises automatic builds within one test binary, so parallel
// environments do not build the same binary twice.
var buildMu sync.Mutex

// Binary returns the path of a control-plane binary such as "kube-apiserver"
// or "etcd". When it is missing and the working directory lies inside a
// handlerkit checkout, it is built with hack/build-controlplane.sh; otherwise
// the error names the make target that builds it.
func Binary(name string) (string, error) {
	return findOrBuild(buildRecipe{
		dir: BinDir(), name: name,
		script: "build-controlplane.sh", args: []string{name}, makeTarget: "controlplane",
		env:     []string{EnvBinDir + "=" + BinDir()},
		missing: fmt.Sprintf("point %s at a directory holding kube-apiserver and etcd %s", EnvBinDir, KubeVersion),
	})
}

// buildRecipe says where a cached binary lives and which hack/ script builds it.
type buildRecipe struct {
	dir, name  string
	script     string   // in hack/
	args       []string // for the script
	makeTarget string   // named in errors
	env        []string // for the script
	missing    string   // the alternative to building, for the error outside a checkout
}

// findOrBuild returns dir/name, building it with the recipe's script when it
// is missing and a handlerkit checkout is at hand.
func findOrBuild(r buildRecipe) (string, error) {
	path := filepath.Join(r.dir, r.name)
	if isExecutable(path) {
		return path, nil
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if isExecutable(path) {
		return path, nil
	}
	script, ok := findHackScript(r.script)
	if !ok {
		return "", fmt.Errorf("testenv: %s not found at %s; build it with `make %s` in a handlerkit checkout, or %s",
			r.name, path, r.makeTarget, r.missing)
	}
	fmt.Fprintf(os.Stderr, "testenv: %s is missing from %s; building it with %s (a cold build takes minutes)\n",
		r.name, r.dir, script)
	cmd := exec.Command(script, r.args...)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(), r.env...)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("testenv: building %s with %s failed: %w; run `make %s` to see why", r.name, script, err, r.makeTarget)
	}
	if !isExecutable(path) {
		return "", fmt.Errorf("testenv: %s did not produce %s", script, path)
	}
	return path, nil
}

func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && !info.IsDir() && info.Mode()&0o111 != 0
}

// findHackScript walks up from the working directory to the handlerkit
// module root and returns its hack/<name>.
func findHackScript(name string) (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if isHandlerkitRoot(dir) {
			script := filepath.Join(dir, "hack", name)
			return script, isExecutable(script)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func isHandlerkitRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if line := strings.TrimSpace(s.Text()); strings.HasPrefix(line, "module ") {
			return strings.TrimSpace(strings.TrimPrefix(line, "module ")) == "github.com/handlerkit/handlerkit"
		}
	}
	return false
}
