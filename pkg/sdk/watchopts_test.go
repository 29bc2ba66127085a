package sdk_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

func TestCustomTransformShapesTheCachedObject(t *testing.T) {
	f := newFixture(t)
	rec := &recorder{}
	dropData := func(obj runtime.Object) (runtime.Object, error) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			cm.Data = nil
			if cm.Annotations == nil {
				cm.Annotations = map[string]string{}
			}
			cm.Annotations["transformed"] = "yes"
		}
		return obj, nil
	}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithTransform(dropData)); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	f.start(t)
	if _, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Create(context.Background(),
		configMap(f.ns, "big", map[string]string{"payload": "large"}), metaCreate); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "handled", func() bool { return len(rec.find("big", nil)) == 1 })
	cm := rec.find("big", nil)[0].Object.(*corev1.ConfigMap)
	if cm.Data != nil || cm.Annotations["transformed"] != "yes" {
		t.Errorf("cached object = data %v annotations %v, want the transform applied", cm.Data, cm.Annotations)
	}
}

func TestFieldSelectorLimitsTheWatch(t *testing.T) {
	f := newFixture(t)
	rec := &recorder{}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithFieldSelector("metadata.name=chosen")); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	f.start(t)
	// "other" goes first: were it not filtered, it would arrive before
	// "chosen".
	f.createCM(t, "other")
	f.createCM(t, "chosen")
	eventually(t, 10*time.Second, "chosen handled", func() bool { return len(rec.find("chosen", nil)) == 1 })
	if got := f.counter(t, "handlerkit_events_total", map[string]string{"watch": "configmap/" + f.ns, "type": "add"}); got != 1 {
		t.Errorf("informer saw %v adds, want 1", got)
	}
}

// countingLimiter delays every retry by a fixed time and counts its use.
type countingLimiter struct{ whens atomic.Int32 }

func (c *countingLimiter) When(string) time.Duration { c.whens.Add(1); return 10 * time.Millisecond }
func (c *countingLimiter) Forget(string)             {}
func (c *countingLimiter) NumRequeues(string) int    { return int(c.whens.Load()) }

func TestCustomRateLimiterReplacesTheRetryPolicy(t *testing.T) {
	lim := &countingLimiter{}
	f := newFixture(t, sdk.WithRateLimiter(func() workqueue.TypedRateLimiter[string] { return lim }))
	var calls atomic.Int32
	watch := startWithHandler(t, f, func(context.Context, sdk.Event) error {
		if calls.Add(1) <= 2 {
			return errors.New("not yet")
		}
		return nil
	})
	f.createCM(t, "limited")
	eventually(t, 10*time.Second, "success", func() bool {
		return f.counter(t, "handlerkit_handle_total", map[string]string{"watch": watch, "result": "success"}) == 1
	})
	if got := lim.whens.Load(); got != 2 {
		t.Errorf("custom limiter consulted %d times, want 2 (one per failure)", got)
	}
}
