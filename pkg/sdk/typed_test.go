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
	"github.com/handlerkit/handlerkit/pkg/testenv"
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

// GizmoList is Gizmo's list type, for typed list and watch clients.
type GizmoList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Gizmo `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (l *GizmoList) DeepCopyObject() runtime.Object {
	out := &GizmoList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for _, g := range l.Items {
		out.Items = append(out.Items, *g.DeepCopyObject().(*Gizmo))
	}
	return out
}

// installGizmos installs a Gizmo CRD in a fresh group whose schema accepts
// anything, and returns its group version and a scheme that knows the Go
// types.
func installGizmos(t *testing.T, env *testenv.Environment, prefix string) (schema.GroupVersion, *runtime.Scheme) {
	t.Helper()
	// A fresh group per run: CRDs outlive the test in the shared control plane.
	group := fmt.Sprintf("%s%d.handlerkit.dev", prefix, time.Now().UnixNano())
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
	scheme.AddKnownTypes(gv, &Gizmo{}, &GizmoList{})
	metav1.AddToGroupVersion(scheme, gv)
	return gv, scheme
}

// createGizmo creates a Gizmo whose spec.size is size, of whatever type.
func createGizmo(t *testing.T, env *testenv.Environment, gv schema.GroupVersion, ns, name string, size any) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"size": size}}}
	u.SetAPIVersion(gv.String())
	u.SetKind("Gizmo")
	u.SetNamespace(ns)
	u.SetName(name)
	if _, err := dyn.Resource(gv.WithResource("gizmos")).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestKindsInTheSchemeArriveTypedFromDynamicInformers(t *testing.T) {
	env := sdk.SharedEnv(t)
	gv, scheme := installGizmos(t, env, "typed")
	f := newFixture(t, sdk.WithScheme(scheme))
	rec := &recorder{}
	if err := f.op.Watch(gv.String(), "Gizmo", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	f.start(t)

	createGizmo(t, env, gv, f.ns, "g1", int64(7))
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
