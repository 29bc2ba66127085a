package action_test

import (
	"context"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// jmxFixture is a counting fixture whose Operator knows the
// PrometheusJmxExporter type, with its CRD (which has a status
// subresource) installed.
func jmxFixture(t *testing.T) *countingFixture {
	t.Helper()
	if _, err := sharedEnv(t).InstallCRDsFromDir(context.Background(), "../../../deploy/crds"); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := jmxv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return newCountingFixture(t, sdk.WithScheme(scheme))
}

func exporter(ns, name string) *jmxv1alpha1.PrometheusJmxExporter {
	return &jmxv1alpha1.PrometheusJmxExporter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: jmxv1alpha1.PrometheusJmxExporterSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "orders"}},
			Port:     9404,
		},
	}
}

// A status computed from a stale cached object is refused by the API
// server; the retry reads the object live and computes the status again
// from what is really there.
func TestStatusFromAStaleCacheIsRetriedOnTheLiveObject(t *testing.T) {
	f := jmxFixture(t)
	ctx := context.Background()
	exp := exporter(f.ns, "orders")
	if err := f.w.Create(ctx, exp); err != nil {
		t.Fatal(err)
	}
	stale := &staleReader{Interface: f.r, snapshot: exp.DeepCopy()}
	// Someone changes the spec just before: generation 2, a new
	// resourceVersion.
	exp.Spec.Port = 9500
	if err := f.w.Update(ctx, exp); err != nil {
		t.Fatal(err)
	}
	if exp.Generation != 2 {
		t.Fatalf("generation after a spec change = %d, want 2", exp.Generation)
	}

	f.reqs.reset()
	obj := &jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "orders"}}
	observe := func() error {
		obj.Status.ObservedGeneration = obj.Generation
		obj.Status.MatchedPods = obj.Spec.Port - 9400
		return nil
	}
	got, err := action.UpdateStatusWithRetry(ctx, stale, f.w, obj, observe)
	if err != nil || got != action.Updated {
		t.Fatalf("UpdateStatusWithRetry = %q, %v; want updated", got, err)
	}
	if stale.served != 1 {
		t.Fatalf("the stale object was served %d times, want once", stale.served)
	}
	if puts, gets := f.reqs.count(http.MethodPut, "/status"), f.reqs.count(http.MethodGet, "/orders"); puts != 2 || gets != 1 {
		t.Errorf("requests:\n%s\nwant 2 status writes (a conflict, then success) and 1 live read", f.reqs)
	}
	stored := &jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "orders"}}
	if err := f.r.Get(ctx, stored, query.Live()); err != nil {
		t.Fatal(err)
	}
	if stored.Status.ObservedGeneration != 2 || stored.Status.MatchedPods != 100 || stored.Spec.Port != 9500 {
		t.Errorf("stored generation %d status %+v port %d; want the status of generation 2 and the concurrent spec kept",
			stored.Generation, stored.Status, stored.Spec.Port)
	}

	// The same status again: nothing is written.
	f.reqs.reset()
	got, err = action.UpdateStatusWithRetry(ctx, f.r, f.w, obj, observe)
	if err != nil || got != action.Unchanged {
		t.Fatalf("UpdateStatusWithRetry again = %q, %v; want unchanged", got, err)
	}
	if n := f.reqs.writes(); n != 0 {
		t.Errorf("an unchanged status sent %d writes:\n%s", n, f.reqs)
	}
	// A mutate that changes only the spec writes nothing either: the
	// status subresource would drop it.
	got, err = action.UpdateStatusWithRetry(ctx, f.r, f.w, obj, func() error { obj.Spec.Port = 10000; return nil })
	if err != nil || got != action.Unchanged || f.reqs.writes() != 0 {
		t.Errorf("spec-only mutate = %q, %v with %d writes; want unchanged, no write", got, err, f.reqs.writes())
	}
}

func TestStatusOfAnUnstructuredObjectIsWrittenOnlyWhenChanged(t *testing.T) {
	f := newCountingFixture(t)
	ctx := context.Background()
	if err := f.w.Create(ctx, gadget(f.ns, "g")); err != nil {
		t.Fatal(err)
	}
	g := gadget(f.ns, "g")
	phase := "Ready"
	mutate := func() error { return unstructured.SetNestedField(g.Object, phase, "status", "phase") }
	for i, want := range []action.OperationResult{action.Updated, action.Unchanged} {
		f.reqs.reset()
		got, err := action.UpdateStatusWithRetry(ctx, f.r, f.w, g, mutate)
		if err != nil || got != want {
			t.Fatalf("call %d = %q, %v; want %q", i+1, got, err, want)
		}
		wantWrites := 0
		if want == action.Updated {
			wantWrites = 1
		}
		if n := f.reqs.count(http.MethodPut, "/status"); n != wantWrites || f.reqs.writes() != wantWrites {
			t.Fatalf("call %d: requests\n%s\nwant %d status write(s)", i+1, f.reqs, wantWrites)
		}
	}
	live := gadget(f.ns, "g")
	if err := f.r.Get(ctx, live, query.Live()); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := unstructured.NestedString(live.Object, "status", "phase"); p != "Ready" {
		t.Errorf("stored status.phase = %q", p)
	}
}
