package testbin

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildModules are the modules the recipes use.
func buildModules() []*buildModule {
	return []*buildModule{toolsModule, containerdModule, prometheusModule}
}

func TestBuildModulesMatchHack(t *testing.T) {
	for _, m := range buildModules() {
		for path, embedded := range m.files {
			got, err := buildmodFS.ReadFile(embedded)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("..", "..", "..", m.hackDir, filepath.FromSlash(path)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("pkg/testenv/testbin/%s differs from %s/%s; run `go generate ./pkg/testenv/testbin`", embedded, m.hackDir, path)
			}
		}
	}
}

func TestVersionsMatchTheBuildModules(t *testing.T) {
	if got := toolsModule.requiredVersion("k8s.io/kubernetes"); got != KubeVersion {
		t.Errorf("%s requires k8s.io/kubernetes %q; KubeVersion is %q", toolsModule.hackDir, got, KubeVersion)
	}
	if got := containerdModule.requiredVersion("github.com/containerd/containerd/v2"); got != ContainerdVersion {
		t.Errorf("%s requires containerd %q; ContainerdVersion is %q", containerdModule.hackDir, got, ContainerdVersion)
	}
	if got, want := prometheusModule.requiredVersion("github.com/prometheus/prometheus"), prometheusModuleVersion(); got != want || want == "" {
		t.Errorf("%s requires prometheus %q; PrometheusVersion %q is module version %q", prometheusModule.hackDir, got, PrometheusVersion, want)
	}
	// Every staging module must be pinned to the release's v0.x twin.
	staging := "v0." + strings.TrimPrefix(KubeVersion, "v1.")
	data, err := buildmodFS.ReadFile(toolsModule.files["go.mod"])
	if err != nil {
		t.Fatal(err)
	}
	replaces := 0
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 4 && fields[1] == "=>" && strings.HasPrefix(fields[0], "k8s.io/") {
			replaces++
			if fields[3] != staging {
				t.Errorf("replace %s => %s %s; want %s", fields[0], fields[2], fields[3], staging)
			}
		}
	}
	if replaces == 0 {
		t.Errorf("%s has no k8s.io replace lines", toolsModule.hackDir)
	}
}

func TestEveryBinaryResolvesFromTheEmbeddedModules(t *testing.T) {
	for _, m := range buildModules() {
		dir := t.TempDir()
		if err := m.write(dir); err != nil {
			t.Fatal(err)
		}
		args := []string{"list", "-deps", "-f", "{{if .Error}}{{.ImportPath}}: {{.Error}}{{end}}"}
		if m.tags != "" {
			args = append(args, "-tags", m.tags)
		}
		n := 0
		for _, r := range recipes() {
			if r.module == m {
				args = append(args, r.pkg)
				n++
			}
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("go list of the %d binaries of %s: %v\n%s", n, m.hackDir, err, out)
		}
	}
}

// TestNodeBinariesBuildOnceOutsideTheCheckout and
// TestDownloadBinarySourcesBuildsNothing moved to cmd/testenv-build, where
// they run the command itself, in the lane of the packages that start no
// node.

// assertOnlyBinaries fails unless dir holds exactly the named binaries and
// the lock file: no build module, no partial output.
func assertOnlyBinaries(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{buildLockName: true}
	for _, n := range names {
		want[n] = true
	}
	for _, e := range entries {
		if !want[e.Name()] {
			t.Errorf("%s holds %s, left by a build", dir, e.Name())
		}
	}
}

func TestFailedBuildShowsGoOutputAndHowToBuildByHand(t *testing.T) {
	dir := t.TempDir()
	bogus := recipe{name: "kube-nothing", module: toolsModule, pkg: "k8s.io/kubernetes/cmd/kube-nothing",
		ldflags: "-s -w", dir: func() string { return dir }, version: KubeVersion}
	var progress bytes.Buffer
	err := buildGroup(context.Background(), &progress, false, []recipe{bogus})
	if err == nil {
		t.Fatal("building a package that does not exist succeeded")
	}
	for _, want := range []string{
		"testenv: building kube-nothing " + KubeVersion + " from the Go module proxy into " + dir + " failed",
		"k8s.io/kubernetes/cmd/kube-nothing", // go build's own words, from the tail
		"go run github.com/handlerkit/handlerkit/cmd/testenv-build kube-nothing",
		EnvBinDir,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if !strings.Contains(progress.String(), "testenv: building kube-nothing") {
		t.Errorf("no progress line before the build: %q", progress.String())
	}
	assertOnlyBinaries(t, dir)
}

func TestUnknownBinaryIsAnError(t *testing.T) {
	if _, err := Binary(context.Background(), "kubectl"); err == nil || !strings.Contains(err.Error(), "kube-apiserver") {
		t.Fatalf("want an error listing the known binaries, got %v", err)
	}
}
