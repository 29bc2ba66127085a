package sdk_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
	jmxinformers "github.com/handlerkit/handlerkit/pkg/generated/informers/externalversions"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// TestGeneratedCRDInformerFactoryServesTheWatch plugs the factory that
// code-generator made for our own CRD into the Operator, with no glue, and
// shows events and cached reads come from it, typed.
func TestGeneratedCRDInformerFactoryServesTheWatch(t *testing.T) {
	env := sdk.SharedEnv(t)
	ctx := context.Background()
	if _, err := env.InstallCRDsFromDir(ctx, "../../deploy/crds"); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := jmxv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	jmxClient, err := versioned.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	var built atomic.Int32
	f := newFixture(t,
		sdk.WithScheme(scheme),
		sdk.WithInformerFactory(func(ns string, resync time.Duration, tweak func(*metav1.ListOptions)) sdk.InformerFactory[jmxinformers.GenericInformer] {
			built.Add(1)
			return jmxinformers.NewSharedInformerFactoryWithOptions(jmxClient, resync,
				jmxinformers.WithNamespace(ns), jmxinformers.WithTweakListOptions(tweak))
		}))
	rec := &recorder{}
	if err := f.op.Watch(jmxv1alpha1.SchemeGroupVersion.String(), "PrometheusJmxExporter", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	f.start(t)
	if built.Load() == 0 {
		t.Fatal("the generated factory was never asked for the PrometheusJmxExporter informer")
	}

	pje := &jmxv1alpha1.PrometheusJmxExporter{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "orders"},
		Spec: jmxv1alpha1.PrometheusJmxExporterSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "orders"}},
		},
	}
	if _, err := jmxClient.JmxV1alpha1().PrometheusJmxExporters(f.ns).Create(ctx, pje, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "exporter handled", func() bool { return len(rec.find("orders", nil)) > 0 })
	got, ok := rec.find("orders", nil)[0].Object.(*jmxv1alpha1.PrometheusJmxExporter)
	if !ok {
		t.Fatalf("event object is %T, want *v1alpha1.PrometheusJmxExporter", rec.find("orders", nil)[0].Object)
	}
	if got.Spec.Port != jmxv1alpha1.DefaultPort {
		t.Errorf("port = %d, want the server-side default %d", got.Spec.Port, jmxv1alpha1.DefaultPort)
	}

	// The handler's read is served by the generated informer's cache.
	read := &jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "orders"}}
	if err := query.For(f.op).Get(ctx, read); err != nil {
		t.Fatal(err)
	}
	if read.Spec.Selector.MatchLabels["app"] != "orders" {
		t.Errorf("query returned %+v", read.Spec)
	}
}
