package sdk_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

func TestTypedHandlerReceivesItsGoTypeFromAWatch(t *testing.T) {
	f := newFixture(t)
	var (
		mu   sync.Mutex
		seen = map[string]string{}
	)
	h := sdk.TypedHandler(func(ctx context.Context, cm *corev1.ConfigMap, e sdk.Event) error {
		mu.Lock()
		defer mu.Unlock()
		seen[cm.Name] = cm.Data["k"] + "/" + string(e.Type)
		return nil
	})
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithHandler(h)); err != nil {
		t.Fatal(err)
	}
	f.start(t)
	if _, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Create(context.Background(), configMap(f.ns, "typed", map[string]string{"k": "v"}), metaCreate); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "typed handling", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["typed"] == "v/add"
	})
}

func TestTypedHandlerFailsTerminallyOnAnotherType(t *testing.T) {
	env := sdk.SharedEnv(t)
	// The scheme knows Gizmo, but the Operator is not given it: Gizmos
	// arrive unstructured.
	gv, _ := installGizmos(t, env, "typedhandler")
	f := newFixture(t)
	var calls atomic.Int32
	h := sdk.TypedHandler(func(ctx context.Context, g *Gizmo, e sdk.Event) error {
		calls.Add(1)
		return nil
	})
	if err := f.op.Watch(gv.String(), "Gizmo", f.ns, 0, sdk.WithHandler(h)); err != nil {
		t.Fatal(err)
	}
	f.start(t)
	createGizmo(t, env, gv, f.ns, "g", int64(1))
	labels := map[string]string{"watch": "gizmo." + gv.Group + "/" + f.ns, "result": "terminal"}
	eventually(t, 10*time.Second, "a terminal handling", func() bool {
		v, _ := metricValue(t, f.reg, "handlerkit_handle_total", labels)
		return v == 1
	})
	if calls.Load() != 0 {
		t.Errorf("the typed function was called %d times with an object that is not a *Gizmo", calls.Load())
	}
	// Terminal: not retried. A deliberate pause, not a wait: it proves that no retry comes (the
	// backoff of a retry starts at a few milliseconds).
	time.Sleep(300 * time.Millisecond)
	if v, _ := metricValue(t, f.reg, "handlerkit_handle_total", labels); v != 1 {
		t.Errorf("terminal handlings = %v, want 1 (no retry)", v)
	}
}

func TestTypedHandlerErrorNamesBothTypes(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("example.dev/v1")
	u.SetKind("Widget")
	h := sdk.TypedHandler(func(context.Context, *corev1.Pod, sdk.Event) error { return nil })
	for _, obj := range []sdk.Event{{Object: u, Watch: "w"}, {Object: nil, Watch: "w"}, {Object: &corev1.Secret{}, Watch: "w"}} {
		err := h.Handle(context.Background(), obj)
		if !sdk.IsTerminal(err) {
			t.Fatalf("Handle(%T) = %v, want a terminal error", obj.Object, err)
		}
		if !strings.Contains(err.Error(), "*v1.Pod") {
			t.Errorf("error %q does not name the wanted type", err)
		}
	}
	err := h.Handle(context.Background(), sdk.Event{Object: u, Watch: "w"})
	if !strings.Contains(err.Error(), "*unstructured.Unstructured") || !strings.Contains(err.Error(), "scheme") {
		t.Errorf("error %q does not explain the unstructured object", err)
	}
}
