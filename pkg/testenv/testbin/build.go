package testbin

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The modules the binaries are built from are copies of hack/tools and
// hack/containerd, where they are maintained (go get, go mod tidy); embedding
// them lets a module that only imports pkg/testenv build the same binaries.
// TestBuildModulesMatchHack fails when a copy is stale.
//
//go:generate cp ../../../hack/tools/go.mod buildmod/tools.mod
//go:generate cp ../../../hack/tools/go.sum buildmod/tools.sum
//go:generate cp ../../../hack/tools/cmd/etcd/main.go buildmod/etcd-main.go.txt
//go:generate cp ../../../hack/containerd/go.mod buildmod/containerd.mod
//go:generate cp ../../../hack/containerd/go.sum buildmod/containerd.sum
//go:generate cp ../../../hack/prometheus/go.mod buildmod/prometheus.mod
//go:generate cp ../../../hack/prometheus/go.sum buildmod/prometheus.sum
//go:embed buildmod
var buildmodFS embed.FS

// buildModule is a Go module that binaries are built from: files maps a path
// in the module to a file embedded under buildmod/.
type buildModule struct {
	hackDir string // where it is maintained, for messages and the drift test
	files   map[string]string
	tags    string // build tags for every binary of the module
}

var (
	toolsModule = &buildModule{hackDir: "hack/tools", files: map[string]string{
		"go.mod":           "buildmod/tools.mod",
		"go.sum":           "buildmod/tools.sum",
		"cmd/etcd/main.go": "buildmod/etcd-main.go.txt",
	}}
	containerdModule = &buildModule{hackDir: "hack/containerd", tags: "no_btrfs no_devmapper no_zfs", files: map[string]string{
		"go.mod": "buildmod/containerd.mod",
		"go.sum": "buildmod/containerd.sum",
	}}
	// Only the Kubernetes service discovery is compiled in: the build tags
	// drop the cloud providers' SDKs, which would more than double the cold
	// build.
	prometheusModule = &buildModule{hackDir: "hack/prometheus", tags: "remove_all_sd enable_kubernetes_sd", files: map[string]string{
		"go.mod": "buildmod/prometheus.mod",
		"go.sum": "buildmod/prometheus.sum",
	}}
)

// recipe says how one cached binary is built.
type recipe struct {
	name    string
	module  *buildModule
	pkg     string        // main package path
	ldflags string        // for the linker
	dir     func() string // the cache directory it lives in
	version string        // what is built, for messages
}

// kubeLDFlags are the version ldflags the Kubernetes release build sets, so
// that /version and --version report KubeVersion instead of v0.0.0-master.
func kubeLDFlags() string {
	const pkg = "k8s.io/component-base/version"
	minor := strings.SplitN(strings.TrimPrefix(KubeVersion, "v1."), ".", 2)[0]
	return strings.Join([]string{"-s -w",
		"-X " + pkg + ".gitVersion=" + KubeVersion,
		"-X " + pkg + ".gitMajor=1",
		"-X " + pkg + ".gitMinor=" + minor,
		"-X " + pkg + ".gitTreeState=clean",
		"-X " + pkg + ".buildDate=1970-01-01T00:00:00Z",
	}, " ")
}

// containerdLDFlags stamp the version containerd reports.
func containerdLDFlags() string {
	const pkg = "github.com/containerd/containerd/v2"
	return "-s -w -X " + pkg + "/version.Version=" + ContainerdVersion + " -X " + pkg + "/version.Package=" + pkg
}

// recipes lists every binary testenv builds, control plane first, then the
// node's, then Prometheus (pkg/testenv/prometheus).
func recipes() []recipe {
	kube := func(name string) recipe {
		return recipe{name: name, module: toolsModule, pkg: "k8s.io/kubernetes/cmd/" + name,
			ldflags: kubeLDFlags(), dir: BinDir, version: KubeVersion}
	}
	containerd := func(name string) recipe {
		return recipe{name: name, module: containerdModule, pkg: "github.com/containerd/containerd/v2/cmd/" + name,
			ldflags: containerdLDFlags(), dir: ContainerdDir, version: ContainerdVersion}
	}
	return []recipe{
		kube("kube-apiserver"),
		{name: "etcd", module: toolsModule, pkg: "github.com/handlerkit/handlerkit/hack/tools/cmd/etcd",
			ldflags: "-s -w", dir: BinDir, version: toolsModule.requiredVersion("go.etcd.io/etcd/server/v3")},
		kube("kube-controller-manager"),
		kube("kube-scheduler"),
		kube("kubelet"),
		kube("kube-proxy"),
		containerd("containerd"),
		containerd("containerd-shim-runc-v2"),
		containerd("ctr"),
		{name: "prometheus", module: prometheusModule, pkg: "github.com/prometheus/prometheus/cmd/prometheus",
			ldflags: prometheusLDFlags(), dir: PrometheusDir, version: PrometheusVersion},
	}
}

// ControlPlaneBinaries names the binaries Start runs.
func ControlPlaneBinaries() []string { return []string{"kube-apiserver", "etcd"} }

// NodeBinaries names the binaries cluster mode adds to them: those WithNode
// runs, and kube-proxy, which only WithServiceProxy runs (and Start builds
// only then). runc, iptables and the CNI plugins are not among them: they
// come from the distribution (Debian: runc, iptables,
// containernetworking-plugins).
func NodeBinaries() []string {
	return []string{"kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy",
		"containerd", "containerd-shim-runc-v2", "ctr"}
}

func recipeFor(name string) (recipe, error) {
	for _, r := range recipes() {
		if r.name == name {
			return r, nil
		}
	}
	known := append(append(ControlPlaneBinaries(), NodeBinaries()...), PrometheusBinaries()...)
	return recipe{}, fmt.Errorf("testenv: no binary named %q (known: %s)", name, strings.Join(known, ", "))
}

// EnsureBinaries builds those of the named binaries that are missing from
// the cache (BinDir, ContainerdDir, PrometheusDir) from the Go module proxy, with the go
// command in PATH. A cold build takes minutes (kube-apiserver about 5 on two
// cores); a progress line goes to stderr. Concurrent builds, also by other
// processes, are serialised with a lock file in the cache directory.
func EnsureBinaries(ctx context.Context, names ...string) error {
	return ensure(ctx, os.Stderr, false, names)
}

// RebuildBinaries builds the named binaries even when they are cached, and
// replaces the cached files atomically.
func RebuildBinaries(ctx context.Context, names ...string) error {
	return ensure(ctx, os.Stderr, true, names)
}

// ensure builds the named binaries (all of them with rebuild, else the
// missing ones), one go build per module and cache directory.
func ensure(ctx context.Context, progress io.Writer, rebuild bool, names []string) error {
	groups, err := groupRecipes(names)
	if err != nil {
		return err
	}
	for _, g := range groups {
		if err := buildGroup(ctx, progress, rebuild, g); err != nil {
			return err
		}
	}
	return nil
}

// DownloadBinarySources downloads the Go modules that building the named
// binaries needs into the module cache, without building anything: cached
// binaries are skipped, as EnsureBinaries skips them. It lets the
// network-bound part of a cold build run ahead, beside other builds (`make
// test` runs it while it builds the kube binaries).
func DownloadBinarySources(ctx context.Context, names ...string) error {
	groups, err := groupRecipes(names)
	if err != nil {
		return err
	}
	for _, g := range groups {
		todo := missing(g[0].dir(), g, false)
		if len(todo) == 0 {
			continue
		}
		tmp, err := os.MkdirTemp("", "handlerkit-download-")
		if err != nil {
			return fmt.Errorf("testenv: %w", err)
		}
		err = todo[0].module.write(tmp)
		if err == nil {
			// go list loads exactly the packages the build compiles, so it
			// downloads their modules and no others.
			args := append([]string{"list", "-deps", "-f", "{{if .Error}}{{.ImportPath}}: {{.Error}}{{end}}"}, buildArgs(todo)...)
			// Only stdout says which packages failed: stderr carries the
			// "go: downloading" progress lines of a cold module cache.
			var stdout, stderr bytes.Buffer
			cmd, cerr := goCmd(ctx, tmp, args...)
			if cerr != nil {
				err = cerr
			} else {
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err = cmd.Run()
			}
			if err != nil || len(bytes.TrimSpace(stdout.Bytes())) > 0 {
				out := append(stdout.Bytes(), stderr.Bytes()...)
				if err == nil {
					err = errors.New("packages failed to load")
				}
				err = fmt.Errorf("testenv: downloading the modules of %s: %w\n%s", describe(todo), err, tail(out, 30))
			}
		}
		os.RemoveAll(tmp)
		if err != nil {
			return err
		}
	}
	return nil
}

// groupRecipes sorts the named recipes into groups that one go build
// invocation can produce: same module, same cache directory.
func groupRecipes(names []string) ([][]recipe, error) {
	var groups [][]recipe
	index := map[string]int{}
	for _, name := range names {
		r, err := recipeFor(name)
		if err != nil {
			return nil, err
		}
		key := r.module.hackDir + "\x00" + r.dir()
		i, ok := index[key]
		if !ok {
			i = len(groups)
			index[key] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	return groups, nil
}

// buildGroup builds the recipes of one group under the cache directory's
// lock, skipping (without rebuild) what another process built meanwhile.
func buildGroup(ctx context.Context, progress io.Writer, rebuild bool, group []recipe) error {
	dir := group[0].dir()
	todo := missing(dir, group, rebuild)
	if len(todo) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("testenv: creating the binary cache: %w", err)
	}
	unlock, err := lockDir(ctx, progress, dir)
	if err != nil {
		return err
	}
	defer unlock()
	if !rebuild {
		todo = missing(dir, todo, false)
	}
	if len(todo) == 0 {
		return nil
	}
	removeStaleBuilds(dir)
	return build(ctx, progress, dir, todo)
}

// missing returns the recipes whose binary is not in dir (all with rebuild).
func missing(dir string, group []recipe, rebuild bool) []recipe {
	var out []recipe
	for _, r := range group {
		if rebuild || !isExecutable(filepath.Join(dir, r.name)) {
			out = append(out, r)
		}
	}
	return out
}

// buildLockName is the lock file in a cache directory; buildDirPrefix starts
// the temporary build modules next to it.
const (
	buildLockName  = ".build.lock"
	buildDirPrefix = ".build-"
)

// lockDir takes the cache directory's build lock, waiting as long as ctx
// allows. flock locks belong to an open file, so two goroutines of one
// process exclude each other as two processes do.
func lockDir(ctx context.Context, progress io.Writer, dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, buildLockName), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testenv: build lock: %w", err)
	}
	waiting := false
	for {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			return func() { f.Close() }, nil
		}
		if !waiting {
			fmt.Fprintf(progress, "testenv: waiting for another build into %s to finish\n", dir)
			waiting = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("testenv: waiting for another build into %s: %w", dir, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// removeStaleBuilds deletes build modules left by a process that was killed
// while building. The caller holds the lock, so none of them is in use.
func removeStaleBuilds(dir string) {
	stale, _ := filepath.Glob(filepath.Join(dir, buildDirPrefix+"*"))
	for _, s := range stale {
		_ = os.RemoveAll(s)
	}
}

// build writes the group's module into a temporary directory under dir,
// builds every recipe with one go build and moves each binary into place
// with a rename, so no reader ever sees half a binary.
func build(ctx context.Context, progress io.Writer, dir string, todo []recipe) error {
	start := time.Now()
	fmt.Fprintf(progress, "testenv: building %s from the Go module proxy into %s; a cold build takes several minutes\n",
		describe(todo), dir)
	tmp, err := os.MkdirTemp(dir, buildDirPrefix)
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	defer os.RemoveAll(tmp)
	moduleDir, outDir := filepath.Join(tmp, "module"), filepath.Join(tmp, "bin")
	if err := todo[0].module.write(moduleDir); err != nil {
		return err
	}
	if out, err := goBuild(ctx, moduleDir, outDir, todo); err != nil {
		return buildError(todo, dir, err, out)
	}
	for _, r := range todo {
		if err := os.Rename(filepath.Join(outDir, r.name), filepath.Join(dir, r.name)); err != nil {
			return fmt.Errorf("testenv: installing %s: %w", r.name, err)
		}
	}
	fmt.Fprintf(progress, "testenv: built %s in %s\n", describe(todo), time.Since(start).Round(time.Second))
	return nil
}

// describe names what is built: "kube-apiserver v1.36.3, etcd v3.6.8".
func describe(todo []recipe) string {
	parts := make([]string, len(todo))
	for i, r := range todo {
		parts[i] = r.name + " " + r.version
	}
	return strings.Join(parts, ", ")
}

// write materialises the module in dir.
func (m *buildModule) write(dir string) error {
	for path, embedded := range m.files {
		data, err := buildmodFS.ReadFile(embedded)
		if err != nil {
			return fmt.Errorf("testenv: %w", err)
		}
		file := filepath.Join(dir, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return fmt.Errorf("testenv: %w", err)
		}
		if err := os.WriteFile(file, data, 0o644); err != nil {
			return fmt.Errorf("testenv: %w", err)
		}
	}
	return nil
}

// requiredVersion returns the version the module's go.mod requires of path
// ("" when it does not).
func (m *buildModule) requiredVersion(path string) string {
	data, err := buildmodFS.ReadFile(m.files["go.mod"])
	if err != nil {
		return ""
	}
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(s.Text()), "require "))
		if len(fields) >= 2 && fields[0] == path {
			return fields[1]
		}
	}
	return ""
}

// goBuild runs go build in moduleDir for the recipes, static and with
// trimmed paths, and returns its combined output.
func goBuild(ctx context.Context, moduleDir, outDir string, todo []recipe) ([]byte, error) {
	args := []string{"build", "-trimpath", "-o", outDir + string(filepath.Separator)}
	for _, r := range todo {
		// A pattern per package: the last matching -ldflags applies to it.
		args = append(args, "-ldflags", r.pkg+"="+r.ldflags)
	}
	return goCommand(ctx, moduleDir, append(args, buildArgs(todo)...)...)
}

// buildArgs are the build tags and packages of the recipes (of one module).
func buildArgs(todo []recipe) []string {
	var args []string
	if tags := todo[0].module.tags; tags != "" {
		args = append(args, "-tags", tags)
	}
	for _, r := range todo {
		args = append(args, r.pkg)
	}
	return args
}

// goCommand runs the go command in dir and returns its combined output. The
// environment is the caller's with the settings that make the build
// independent of it: no cgo, no workspace, no vendoring, go.mod and go.sum
// used as they are.
func goCommand(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd, err := goCmd(ctx, dir, args...)
	if err != nil {
		return nil, err
	}
	return cmd.CombinedOutput()
}

// goCmd is the go command goCommand runs, for callers that need stdout and
// stderr apart.
func goCmd(ctx context.Context, dir string, args ...string) (*exec.Cmd, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("the go command is not in PATH: %w", err)
	}
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=0",
		"GOWORK=off",
		"GO111MODULE=on",
		"GOFLAGS=-mod=readonly -buildvcs=false",
	)
	cmd.WaitDelay = 10 * time.Second
	return cmd, nil
}

// buildError explains a failed build: the tail of go build's output, and
// how to build by hand or bring binaries of one's own.
func buildError(todo []recipe, dir string, err error, out []byte) error {
	names := make([]string, len(todo))
	for i, r := range todo {
		names[i] = r.name
	}
	return fmt.Errorf("testenv: building %s from the Go module proxy into %s failed: %w\n%s\n"+
		"To build by hand, run `go run github.com/handlerkit/handlerkit/cmd/testenv-build %s` in a module that requires "+
		"handlerkit (or `make controlplane node` in a handlerkit checkout), or point %s (and %s for containerd) "+
		"at a directory that holds the binaries",
		describe(todo), dir, err, tail(out, 30), strings.Join(names, " "), EnvBinDir, EnvContainerdDir)
}

// tail returns the last n lines of out, indented.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return "\t" + strings.Join(lines, "\n\t")
}
