package sdk

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// TestTombstoneKeepsTheFinalState feeds the informer-side entry point the
// DeletedFinalStateUnknown that client-go sends when a delete was missed
// during a relist; the early operator-sdk panicked on it.
func TestTombstoneKeepsTheFinalState(t *testing.T) {
	op, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Watch("v1", "ConfigMap", "ns", 0); err != nil {
		t.Fatal(err)
	}
	w := op.watches[0]
	r := w.newRun(context.Background(), HandlerFunc(func(context.Context, Event) error { return nil }), nil)
	defer r.queue.ShutDown()

	final := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gone"}, Data: map[string]string{"last": "state"}}
	r.notify(EventDelete, nil, cache.DeletedFinalStateUnknown{Key: "ns/gone", Obj: final})

	got, ok := r.tracker.finalState("ns/gone")
	if !ok || got != final {
		t.Fatalf("final state after a tombstone = %v, %v; want the tombstone's object", got, ok)
	}
	if r.queue.Len() != 1 {
		t.Fatalf("queue length = %d, want the key queued once", r.queue.Len())
	}
	key, _ := r.queue.Get()
	if key != "ns/gone" {
		t.Fatalf("queued key = %q, want ns/gone", key)
	}
	r.queue.Done(key)
}
