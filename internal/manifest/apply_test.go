package manifest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/handlerkit/handlerkit/pkg/testenv"
)

var cluster testenv.Shared

func TestMain(m *testing.M) { os.Exit(cluster.Main(m)) }

// TestMissingAndDeleteRemoveOnlyWhatWasCreated is what the demo does on a
// cluster it did not start: note which of its objects are missing, apply
// them all, and at the end delete only those that were missing (newest
// first), leaving what was there before.
func TestMissingAndDeleteRemoveOnlyWhatWasCreated(t *testing.T) {
	env := cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns, err := env.CreateNamespace(ctx, "manifest")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Build(filepath.Join("..", "..", "deploy", "samples"))
	if err != nil {
		t.Fatal(err)
	}
	crds, err := ReadFile(filepath.Join("..", "..", "deploy", "crds", "jmx.handlerkit.dev_prometheusjmxexporters.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs = append(crds, objs...)
	var configMap *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" {
			configMap = o
		}
	}
	a, err := NewApplier(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	// The ConfigMap is there before: it must survive.
	if err := a.Apply(ctx, ns, configMap); err != nil {
		t.Fatal(err)
	}
	missing, err := a.Missing(ctx, ns, objs...)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != len(objs)-1 {
		t.Fatalf("missing %d of %d objects, want all but the ConfigMap", len(missing), len(objs))
	}
	for _, o := range missing {
		if o.GetKind() == "ConfigMap" {
			t.Fatal("the existing ConfigMap counted as missing")
		}
	}
	// The CRD is applied first; the exporter's kind is served after a
	// discovery reset, which Apply does.
	deadline := time.Now().Add(time.Minute)
	for {
		err = a.Apply(ctx, ns, objs...)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if again, err := a.Missing(ctx, ns, objs...); err != nil || len(again) != 0 {
		t.Fatalf("after apply: missing %d, %v", len(again), err)
	}

	if err := a.Delete(ctx, ns, missing...); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(ns).
		Get(ctx, configMap.GetName(), metav1.GetOptions{}); err != nil {
		t.Errorf("the ConfigMap that existed before: %v", err)
	}
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crdGVR).Get(ctx, crds[0].GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the CRD is still there after Delete returned: %v", err)
	}
	left, err := a.Missing(ctx, ns, missing...)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != len(missing) {
		t.Errorf("after Delete %d of %d created objects are still there", len(missing)-len(left), len(missing))
	}
	// Deleting again is a no-op, also for a kind no longer served.
	if err := a.Delete(ctx, ns, missing...); err != nil {
		t.Errorf("second Delete: %v", err)
	}
}
