package outsidemodule

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/internal/testbuild"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// outsideGoMod is the go.mod of a module that uses testenv the way an
// operator author's module does: it requires handlerkit (here replaced by
// this checkout) and nothing else.
const outsideGoMod = `module example.com/outside

go 1.26.0

require github.com/handlerkit/handlerkit v0.0.0

replace github.com/handlerkit/handlerkit => %s
`

// outsideTest is that module's test: start a control plane, use it, stop it.
const outsideTest = `package outside

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/handlerkit/handlerkit/pkg/testenv"
)

func TestControlPlaneFromAnotherModule(t *testing.T) {
	ctx := context.Background()
	env, err := testenv.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	}()
	ns, err := env.CreateNamespace(ctx, "outside")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Clientset().CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := env.Clientset().Discovery().ServerVersion()
	if err != nil || v.GitVersion != testenv.KubeVersion {
		t.Fatalf("/version: %v %v, want %s", v, err, testenv.KubeVersion)
	}
	path, err := env.KubeconfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	list, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range list.Items {
		if item.Name == ns {
			return
		}
	}
	t.Fatalf("namespace %s not listed through the kubeconfig", ns)
}
`

// TestControlPlaneFromAnotherModuleBuildsItsBinaries is the promise to
// operator authors: a module outside this repository, with nothing but the
// Go toolchain and an empty binary cache, runs a test against a real control
// plane. testenv builds kube-apiserver and etcd from the Go module proxy on
// first use; the go build cache is shared, so with a warm one that is
// mostly linking.
func TestControlPlaneFromAnotherModuleBuildsItsBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test in another module and builds kube-apiserver and etcd")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	module, cache := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(module, "go.mod"), strings.Replace(outsideGoMod, "%s", root, 1))
	// handlerkit's go.sum holds every checksum the module needs, so tidy
	// does not have to ask the checksum database.
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(module, "go.sum"), string(sum))
	writeFile(t, filepath.Join(module, "outside_test.go"), outsideTest)

	env := outsideEnv(t, cache)
	runGo(t, module, env, "mod", "tidy")
	start := time.Now()
	out := runGo(t, module, env, "test", "-count=1", "-v", "-timeout=30m", "./...")
	t.Logf("go test in the outside module took %s:\n%s", time.Since(start).Round(time.Second), out)

	if !strings.Contains(out, "testenv: building ") || !strings.Contains(out, "from the Go module proxy") {
		t.Errorf("no progress line for the build in the output")
	}
	// Cluster mode builds its pause image this way, in the user's module.
	runGo(t, module, env, "build", "-o", os.DevNull, "github.com/handlerkit/handlerkit/cmd/pause")
	bin := filepath.Join(cache, "handlerkit", "controlplane", testenv.KubeVersion)
	entries, err := os.ReadDir(bin)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got, want := strings.Join(names, " "), ".build.lock etcd kube-apiserver"; got != want {
		t.Errorf("the new cache holds %q, want %q", got, want)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// outsideEnv is this process's environment for a go command in the outside
// module: an empty binary cache under XDG_CACHE_HOME, no testenv overrides,
// no workspace or vendoring, and the go build and module caches kept where
// they are (the build cache's default lives under XDG_CACHE_HOME too). The
// go commands get this test binary's own build flags (-race and -trimpath
// under make test): the packages the outside module's test imports are then
// the ones make test compiled already, where plain flags compiled client-go,
// apimachinery and the rest a second time on a cold machine.
func outsideEnv(t *testing.T, cache string) []string {
	t.Helper()
	out, err := exec.Command("go", "env", "-json", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		t.Fatal(err)
	}
	var goEnv map[string]string
	if err := json.Unmarshal(out, &goEnv); err != nil {
		t.Fatal(err)
	}
	drop := map[string]bool{
		testenv.EnvBinDir: true, testenv.EnvContainerdDir: true, testenv.EnvKubeconfig: true,
		"XDG_CACHE_HOME": true, "GOFLAGS": true, "GOWORK": true, "KUBECONFIG": true,
		"GOCACHE": true, "GOMODCACHE": true, "GOPATH": true,
	}
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !drop[name] {
			env = append(env, kv)
		}
	}
	for name, value := range goEnv {
		env = append(env, name+"="+value)
	}
	goflags := strings.Join(append([]string{"-mod=mod"}, testbuild.Flags()...), " ")
	return append(env, "XDG_CACHE_HOME="+cache, "GOWORK=off", "GOFLAGS="+goflags)
}

// runGo runs the go command in dir and returns its output, failing t with
// it when the command fails. The command and what it starts run in a
// process group of their own, killed when the test gives up on them.
func runGo(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}
