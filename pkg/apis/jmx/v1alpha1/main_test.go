package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// One control plane serves every test in this package (each test works in
// its own namespace); it starts on first use so the unit tests need none.
var (
	shared = testenv.Shared{
		Setup: func(ctx context.Context, env *testenv.Environment) (err error) {
			clusterCRDs, err = env.InstallCRDsFromDir(ctx, "../../../../deploy/crds")
			return err
		},
	}
	// clusterCRDs are the CRDs the shared environment installed.
	clusterCRDs []*apiextensionsv1.CustomResourceDefinition
)

func TestMain(m *testing.M) {
	os.Exit(shared.Main(m))
}

// repoPath resolves a path relative to the repository root. go test runs a
// package's tests in its directory (the source file's own path is no help:
// make test builds with -trimpath).
func repoPath(t testing.TB, rel string) string {
	t.Helper()
	return filepath.Join("..", "..", "..", "..", rel)
}

// cluster returns the shared environment with the CRDs of deploy/crds
// installed and Established.
func cluster(t *testing.T) *testenv.Environment {
	t.Helper()
	return shared.Get(t)
}

// namespace creates a namespace for one test and deletes it afterwards. On
// the test control plane, which has no namespace controller, the deletion
// only marks it Terminating; it matters when HANDLERKIT_TEST_KUBECONFIG
// points the tests at a real cluster.
func namespace(t *testing.T, env *testenv.Environment) string {
	t.Helper()
	ns, err := env.CreateNamespace(context.Background(), "pje-")
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		err := env.Clientset().CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting namespace %s: %v", ns, err)
		}
	})
	return ns
}
