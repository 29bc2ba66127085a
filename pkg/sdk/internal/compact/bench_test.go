package compact_test

import (
	goruntime "runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/handlerkit/handlerkit/pkg/sdk/internal/compact"
)

// BenchmarkPodMemory reports the live heap that 2,000 cached Pods hold,
// per Pod, decoded and compact (managedFields stripped, without interning):
// what a cache of them costs.
func BenchmarkPodMemory(b *testing.B) {
	const n = 2000
	for _, compactForm := range []bool{false, true} {
		name := "decoded"
		if compactForm {
			name = "compact"
		}
		b.Run(name, func(b *testing.B) {
			var perPod float64
			for b.Loop() {
				objs := make([]runtime.Object, n)
				goruntime.GC()
				var before, after goruntime.MemStats
				goruntime.ReadMemStats(&before)
				for i := range objs {
					objs[i] = testPod(b)
					if compactForm {
						objs[i] = compacted(b, objs[i])
					}
				}
				goruntime.GC()
				goruntime.ReadMemStats(&after)
				perPod = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
				goruntime.KeepAlive(objs)
			}
			b.ReportMetric(perPod, "live-B/pod")
		})
	}
}

// BenchmarkPodRead compares what a handler's read of a cached Pod costs:
// a deep copy of the decoded Pod, or decoding the compact one.
func BenchmarkPodRead(b *testing.B) {
	p := testPod(b)
	b.Run("deepcopy", func(b *testing.B) {
		for b.Loop() {
			_ = p.DeepCopyObject()
		}
	})
	c := compacted(b, testPod(b))
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Decode(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkPodCompact is what caching a Pod costs in CPU: Of, once per
// object the informer receives.
func BenchmarkPodCompact(b *testing.B) {
	pods := make([]*corev1.Pod, 0, 1024)
	for b.Loop() {
		if len(pods) == 0 {
			b.StopTimer()
			for range cap(pods) {
				pods = append(pods, testPod(b))
			}
			b.StartTimer()
		}
		p := pods[len(pods)-1]
		pods = pods[:len(pods)-1]
		if _, _, err := compact.Of(p); err != nil {
			b.Fatal(err)
		}
	}
}
