package sdk_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

const benchObjects = 2000

var benchNS struct {
	once sync.Once
	ns   string
	err  error
}

// benchNamespace returns a namespace holding benchObjects ConfigMaps shaped
// like typical operator inputs: labels, annotations, a few data keys.
func benchNamespace(b *testing.B) string {
	b.Helper()
	env := sdk.SharedEnv(b)
	benchNS.once.Do(func() {
		ctx := context.Background()
		benchNS.ns, benchNS.err = env.CreateNamespace(ctx, "bench-")
		if benchNS.err != nil {
			return
		}
		cs, err := kubernetes.NewForConfig(fastConfig(env.Config()))
		if err != nil {
			benchNS.err = err
			return
		}
		var wg sync.WaitGroup
		var firstErr atomic.Value
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < benchObjects; i += 8 {
					cm := &corev1.ConfigMap{
						ObjectMeta: metav1.ObjectMeta{
							Namespace:   benchNS.ns,
							Name:        fmt.Sprintf("bench-%05d", i),
							Labels:      map[string]string{"app": "bench", "tier": "backend", "index": fmt.Sprint(i)},
							Annotations: map[string]string{"handlerkit.dev/note": "benchmark object"},
						},
						Data: map[string]string{"a": "alpha", "b": "bravo", "c": "charlie", "d": "delta"},
					}
					if _, err := cs.CoreV1().ConfigMaps(benchNS.ns).Create(ctx, cm, metav1.CreateOptions{FieldManager: "bench-writer"}); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err, ok := firstErr.Load().(error); ok {
			benchNS.err = err
		}
	})
	if benchNS.err != nil {
		b.Fatal(benchNS.err)
	}
	return benchNS.ns
}

func benchOperator(b *testing.B, ns string, handler sdk.HandlerFunc, opts ...sdk.WatchOption) (*sdk.Operator, func()) {
	b.Helper()
	env := sdk.SharedEnv(b)
	op, err := sdk.New(env.Config(), sdk.WithRegisterer(prometheus.NewRegistry()), sdk.WithMetricsAddr("0"), sdk.WithLogger(testLogger()))
	if err != nil {
		b.Fatal(err)
	}
	if err := op.Watch("v1", "ConfigMap", ns, 0, opts...); err != nil {
		b.Fatal(err)
	}
	op.Handle(handler)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	return op, func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}
}

// BenchmarkDispatch measures events per second from the informer (the
// initial list of benchObjects objects) through the queue to a no-op handler.
func BenchmarkDispatch(b *testing.B) {
	ns := benchNamespace(b)
	for _, workers := range []int{1, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				var handled atomic.Int64
				allDone := make(chan struct{})
				start := time.Now()
				_, stop := benchOperator(b, ns, func(context.Context, sdk.Event) error {
					if handled.Add(1) == benchObjects {
						close(allDone)
					}
					return nil
				}, sdk.WithNumWorkers(workers))
				select {
				case <-allDone:
				case <-time.After(2 * time.Minute):
					b.Fatalf("handled %d of %d", handled.Load(), benchObjects)
				}
				total += time.Since(start)
				stop()
			}
			b.ReportMetric(float64(benchObjects*b.N)/total.Seconds(), "events/s")
		})
	}
}

// BenchmarkCacheMemoryPerObject measures the heap held per cached object
// with the defaults (compact, managedFields stripped) and with
// managedFields kept.
func BenchmarkCacheMemoryPerObject(b *testing.B) {
	ns := benchNamespace(b)
	for _, c := range []struct {
		name string
		opts []sdk.WatchOption
	}{
		{"strip-managedFields", nil},
		{"keep-managedFields", []sdk.WatchOption{sdk.WithManagedFields()}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var perObject float64
			for range b.N {
				before := heapInUse()
				op, stop := benchOperator(b, ns, func(context.Context, sdk.Event) error { return nil }, c.opts...)
				deadline := time.Now().Add(2 * time.Minute)
				for op.Ready() != nil {
					if time.Now().After(deadline) {
						b.Fatal("cache never synced")
					}
					time.Sleep(10 * time.Millisecond)
				}
				after := heapInUse()
				perObject += float64(after-before) / benchObjects
				runtime.KeepAlive(op)
				stop()
			}
			b.ReportMetric(perObject/float64(b.N), "bytes/object")
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
