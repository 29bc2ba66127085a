package query_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// unreachableDefault makes the Default Operator one whose API server does
// not answer, so that a read through it fails.
func unreachableDefault(t *testing.T) {
	t.Helper()
	op, err := sdk.New(&rest.Config{Host: "https://127.0.0.1:1"}, sdk.WithRegisterer(prometheus.NewRegistry()), sdk.WithMetricsAddr("0"))
	if err != nil {
		t.Fatal(err)
	}
	sdk.SetDefault(op)
	t.Cleanup(func() { sdk.SetDefault(nil) })
}

// In a handler, the package-level functions read through the Operator that
// runs the handler, found through the handler's context, not through the
// Default Operator.
func TestPackageFunctionsReadThroughTheHandlersOperator(t *testing.T) {
	unreachableDefault(t)
	results := make(chan error, 1)
	f := newFixture(t, func(ctx context.Context, e sdk.Event) error {
		cm := e.Object.(*corev1.ConfigMap)
		if e.Deleted || cm.Name != "probe" {
			return nil
		}
		got := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name}}
		err := query.Get(ctx, got, query.Live())
		if err == nil && got.Data["name"] != "probe" {
			err = errors.New("Get filled the wrong object")
		}
		if err == nil {
			var list corev1.ConfigMapList
			err = query.List(ctx, cm.Namespace, &list, query.Live())
		}
		select {
		case results <- err:
		default:
		}
		return nil
	})
	f.createCM(t, "probe", nil)
	select {
	case err := <-results:
		if err != nil {
			t.Fatalf("query in the handler: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never ran")
	}
}

// A cancelled context reaches the request: the read fails with the
// context's error instead of going out.
func TestPackageFunctionsHonourTheContext(t *testing.T) {
	f := newFixture(t, nil)
	sdk.SetDefault(f.op)
	t.Cleanup(func() { sdk.SetDefault(nil) })
	f.createCM(t, "present", nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "present"}}
	if err := query.Get(ctx, cm, query.Live()); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a cancelled context = %v, want context.Canceled", err)
	}
	var list corev1.ConfigMapList
	if err := query.List(ctx, f.ns, &list, query.Live()); !errors.Is(err, context.Canceled) {
		t.Errorf("List with a cancelled context = %v, want context.Canceled", err)
	}
	var noCtx context.Context
	if err := query.Get(noCtx, cm); err == nil {
		t.Error("Get with a nil context succeeded, want an error")
	}
}
