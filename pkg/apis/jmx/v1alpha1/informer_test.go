package v1alpha1_test

import (
	"context"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/generated/informers/externalversions"
)

// eventLog records what an informer's handler saw.
type eventLog struct {
	mu      sync.Mutex
	added   []string
	updated []int32 // status.injectedPods of each update's new object
	deleted []string
}

func (l *eventLog) snapshot() (added []string, updated []int32, deleted []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.added...), append([]int32(nil), l.updated...), append([]string(nil), l.deleted...)
}

func TestInformerAndListerSeeTheObject(t *testing.T) {
	cs := clientset(t)
	ns := namespace(t, cluster(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	factory := externalversions.NewSharedInformerFactoryWithOptions(cs, 0, externalversions.WithNamespace(ns))
	informer := factory.Jmx().V1alpha1().PrometheusJmxExporters()
	lister := informer.Lister()
	log := &eventLog{}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			log.mu.Lock()
			defer log.mu.Unlock()
			log.added = append(log.added, obj.(*jmxv1alpha1.PrometheusJmxExporter).Name)
		},
		UpdateFunc: func(_, obj any) {
			log.mu.Lock()
			defer log.mu.Unlock()
			log.updated = append(log.updated, obj.(*jmxv1alpha1.PrometheusJmxExporter).Status.InjectedPods)
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			log.deleted = append(log.deleted, obj.(*jmxv1alpha1.PrometheusJmxExporter).Name)
		},
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown() // waits for the informer goroutines
	defer cancel()           // runs first: stops them
	for typ, synced := range factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			t.Fatalf("informer for %v did not sync", typ)
		}
	}

	client := cs.JmxV1alpha1().PrometheusJmxExporters(ns)
	created, err := client.Create(ctx, minimalExporter("orders"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "lister to see the created object", func() bool {
		got, err := lister.PrometheusJmxExporters(ns).Get("orders")
		return err == nil && got.UID == created.UID
	})
	all, err := lister.List(labels.SelectorFromSet(labels.Set{"team": "payments"}))
	if err != nil || len(all) != 1 {
		t.Fatalf("lister List by label = %d items, %v; want 1", len(all), err)
	}

	created.Status.InjectedPods = 4
	if _, err := client.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "update handler to see the status update", func() bool {
		_, updated, _ := log.snapshot()
		got, err := lister.PrometheusJmxExporters(ns).Get("orders")
		return err == nil && got.Status.InjectedPods == 4 && len(updated) > 0
	})

	if err := client.Delete(ctx, "orders", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "lister to forget the deleted object", func() bool {
		_, err := lister.PrometheusJmxExporters(ns).Get("orders")
		return apierrors.IsNotFound(err)
	})

	// The informer updates its store before it calls the handlers, so the
	// lister can forget the object a moment before the delete is delivered.
	eventually(ctx, t, "delete handler to run", func() bool {
		_, _, deleted := log.snapshot()
		return len(deleted) > 0
	})
	added, updated, deleted := log.snapshot()
	if len(added) != 1 || added[0] != "orders" {
		t.Errorf("add events = %v, want [orders]", added)
	}
	if len(updated) != 1 || updated[0] != 4 {
		t.Errorf("update events carried injectedPods %v, want [4]", updated)
	}
	if len(deleted) != 1 || deleted[0] != "orders" {
		t.Errorf("delete events = %v, want [orders]", deleted)
	}
}

// eventually polls cond until it holds or ctx ends; informers are
// asynchronous, so the test waits for a state rather than for a time.
func eventually(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
