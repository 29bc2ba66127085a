package sdk_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// Gizmo stands in for a CRD type an application registers in its scheme.
type Gizmo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GizmoSpec `json:"spec,omitempty"`
}

// GizmoSpec is Gizmo's spec.
type GizmoSpec struct {
	Size int64 `json:"size,omitempty"`
}

// DeepCopyObject implements runtime.Object.
func (g *Gizmo) DeepCopyObject() runtime.Object {
	out := &Gizmo{TypeMeta: g.TypeMeta, Spec: g.Spec}
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

func TestKindsInTheSchemeArriveTypedFromDynamicInformers(t *testing.T) {
	group := fmt.Sprintf("typed%d.handlerkit.dev", time.Now().UnixNano())
	env := sdk.SharedEnv(t)
	crd := gadgetCRD(group)
	crd.Name = "gizmos." + group
	crd.Spec.Names.Plural, crd.Spec.Names.Singular, crd.Spec.Names.Kind, crd.Spec.Names.ListKind = "gizmos", "gizmo", "Gizmo", "GizmoList"
	if err := env.InstallCRDs(context.Background(), crd); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	gv := schema.GroupVersion{Group: group, Version: "v1"}
	scheme.AddKnownTypes(gv, &Gizmo{})

	f := newFixture(t, sdk.WithScheme(scheme))
	rec := &recorder{}
	if err := f.op.Watch(gv.String(), "Gizmo", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	f.start(t)

	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(gv.String())
	u.SetKind("Gizmo")
	u.SetNamespace(f.ns)
	u.SetName("g1")
	_ = unstructured.SetNestedField(u.Object, int64(7), "spec", "size")
	if _, err := dyn.Resource(gv.WithResource("gizmos")).Namespace(f.ns).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "gizmo handled", func() bool { return len(rec.find("g1", nil)) == 1 })
	g, ok := rec.find("g1", nil)[0].Object.(*Gizmo)
	if !ok {
		t.Fatalf("object is %T, want *Gizmo", rec.find("g1", nil)[0].Object)
	}
	if g.Spec.Size != 7 || g.Kind != "Gizmo" || g.APIVersion != gv.String() {
		t.Errorf("gizmo = %+v, want size 7 with its kind set", g)
	}
}

func TestRegisteredInformerFactoryIsAskedFirst(t *testing.T) {
	env := sdk.SharedEnv(t)
	cs, err := kubernetes.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	var built atomic.Int32
	f := newFixture(t, sdk.WithInformerFactory(func(ns string, resync time.Duration, tweak func(*metav1.ListOptions)) sdk.InformerFactory[informers.GenericInformer] {
		built.Add(1)
		// Any code-generator factory has this same constructor shape.
		return informers.NewFilteredSharedInformerFactory(cs, resync, ns, tweak)
	}))
	rec := &recorder{}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithLabelSelector("pick=me")); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	f.start(t)
	if built.Load() == 0 {
		t.Fatal("the registered factory constructor was never called")
	}
	ctx := context.Background()
	// "skipped" goes first: were it not filtered, the watch would deliver
	// it before "picked".
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{{"skipped", nil}, {"picked", map[string]string{"pick": "me"}}} {
		cm := configMap(f.ns, c.name, nil)
		cm.Labels = c.labels
		if _, err := env.Clientset().CoreV1().ConfigMaps(f.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "labelled configmap handled", func() bool { return len(rec.find("picked", nil)) == 1 })
	// The tweak carried the selector into the factory's list and watch, so
	// the unlabelled object never reached the informer.
	if got := f.counter(t, "handlerkit_events_total", map[string]string{"watch": "configmap/" + f.ns, "type": "add"}); got != 1 {
		t.Errorf("informer saw %v adds, want 1 (the selector filters server-side)", got)
	}
}
