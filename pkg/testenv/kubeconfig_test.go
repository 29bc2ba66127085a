package testenv_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// listsNamespace fails t unless a client made from cfg lists namespace ns.
func listsNamespace(t *testing.T, cfg *rest.Config, ns string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range list.Items {
		if item.Name == ns {
			return
		}
	}
	t.Fatalf("namespace %s not among the %d listed", ns, len(list.Items))
}

func TestWrittenKubeconfigReachesTheEnvironment(t *testing.T) {
	env := sharedEnv(t)
	ns, err := env.CreateNamespace(t.Context(), "kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := env.WriteKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %v, want 0600: it holds the admin key", info.Mode().Perm())
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	listsNamespace(t, cfg, ns)

	// Code that reads $KUBECONFIG needs the current context set.
	t.Setenv("KUBECONFIG", path)
	cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	listsNamespace(t, cfg, ns)
}

func TestKubeconfigFileIsWrittenOnceInTheEnvironmentDir(t *testing.T) {
	env := sharedEnv(t)
	ns, err := env.CreateNamespace(t.Context(), "kubeconfigfile")
	if err != nil {
		t.Fatal(err)
	}
	path, err := env.KubeconfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(path, env.Dir()+string(filepath.Separator)) {
		t.Errorf("KubeconfigFile %s is not in the environment's directory %s, which Stop removes", path, env.Dir())
	}
	again, err := env.KubeconfigFile()
	if err != nil || again != path {
		t.Errorf("second KubeconfigFile: %q, %v; want %q", again, err, path)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	listsNamespace(t, cfg, ns)
}
