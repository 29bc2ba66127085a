package action_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
)

// In a handler, the package-level functions write through the Operator
// that runs the handler, found through the handler's context, not through
// the Default Operator (here one whose API server does not answer).
func TestPackageFunctionsWriteThroughTheHandlersOperator(t *testing.T) {
	f := newFixture(t)
	unreachable, err := sdk.New(&rest.Config{Host: "https://127.0.0.1:1"}, sdk.WithRegisterer(prometheus.NewRegistry()), sdk.WithMetricsAddr("0"))
	if err != nil {
		t.Fatal(err)
	}
	sdk.SetDefault(unreachable)
	t.Cleanup(func() { sdk.SetDefault(nil) })

	log := logrus.New()
	log.SetOutput(io.Discard)
	op, err := sdk.New(f.env.Config(), sdk.WithRegisterer(prometheus.NewRegistry()), sdk.WithMetricsAddr("0"), sdk.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 1)
	op.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		cm := e.Object.(*corev1.ConfigMap)
		if e.Deleted || cm.Name != "source" {
			return nil
		}
		copied := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: "copy"}, Data: cm.Data}
		err := action.Create(ctx, copied)
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		select {
		case results <- err:
		default:
		}
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "source"}, Data: map[string]string{"k": "v"}}
	if _, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Create(context.Background(), src, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-results:
		if err != nil {
			t.Fatalf("action.Create in the handler: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never ran")
	}
	got, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Get(context.Background(), "copy", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("the copy the handler created: %v, %v", got, err)
	}
}

// A cancelled context reaches every write: each fails with the context's
// error and changes nothing.
func TestPackageFunctionsHonourTheContext(t *testing.T) {
	f := newFixture(t)
	sdk.SetDefault(f.op)
	t.Cleanup(func() { sdk.SetDefault(nil) })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c"}}
	calls := map[string]func() error{
		"Create":       func() error { return action.Create(ctx, cm) },
		"Update":       func() error { return action.Update(ctx, cm) },
		"UpdateStatus": func() error { return action.UpdateStatus(ctx, cm) },
		"Patch":        func() error { return action.Patch(ctx, cm, action.MergePatch, []byte(`{"data":{"k":"v"}}`)) },
		"Delete":       func() error { return action.Delete(ctx, cm) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context = %v, want context.Canceled", name, err)
		}
	}
	if _, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Get(context.Background(), "c", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the cancelled Create wrote anyway: %v", err)
	}
	var noCtx context.Context
	if err := action.Create(noCtx, cm); err == nil {
		t.Error("Create with a nil context succeeded, want an error")
	}
}
