// Package deploy tests the manifests under deploy/ against a real API server
// (pkg/testenv's control plane, no node): that every one applies, with a
// server-side dry run and then for real, that the operator's RBAC is exactly
// the requests its code makes, and that the Deployment is hardened.
package deploy

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/handlerkit/handlerkit/internal/manifest"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

var cluster testenv.Shared

func TestMain(m *testing.M) {
	// test/helm's commands are built beside the control plane's start and
	// the tests that need no Helm; a build no test waited for is ended.
	ctx, cancel := context.WithCancel(context.Background())
	built := make(chan struct{})
	go func() {
		defer close(built)
		_ = buildHelmCommands(ctx) // a test that needs them reports the error
	}()
	code := cluster.Main(m)
	cancel()
	<-built
	os.RemoveAll(helmBin) // test/helm's commands
	os.Exit(code)
}

// repo is the repository root, relative to this package.
const repo = "../.."

// build is manifest.Build of a kustomization under the repository root.
func build(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := manifest.Build(filepath.Join(repo, dir))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// read is manifest.ReadFile of a file under the repository root.
func read(t testing.TB, file string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := manifest.ReadFile(filepath.Join(repo, file))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
