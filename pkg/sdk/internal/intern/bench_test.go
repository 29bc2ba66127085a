package intern_test

import (
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk/internal/intern"
)

// sink keeps the baseline's copies on the heap, as interning's are.
var sink *corev1.Pod

// BenchmarkStringsPod is the CPU and allocations of interning one Pod as
// the cache receives it (managedFields stripped), cycling through 100 Pods
// of 100 ReplicaSets as a cache does through its objects' updates. Each
// iteration interns a fresh deep copy, as the cache gets a freshly decoded
// object, so the deep-copy case is the baseline to subtract.
func BenchmarkStringsPod(b *testing.B) {
	pods := make([]*corev1.Pod, 100)
	for i := range pods {
		pods[i] = pod(b, "payments", i)
		pods[i].ManagedFields = nil
	}
	b.Run("deepcopy", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			sink = pods[i%len(pods)].DeepCopy()
			i++
		}
	})
	b.Run("deepcopy+intern", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := intern.Strings(pods[i%len(pods)].DeepCopy()); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkPodMemory reports the live heap that 2,000 decoded Pods (100
// ReplicaSets' replicas, managedFields stripped) hold, per Pod, with and
// without interning: what a cache of them costs. The heap alone: the
// runtime's records of the canonical strings' weak handles live outside
// it.
func BenchmarkPodMemory(b *testing.B) {
	const n = 2000
	raw := make([][]byte, n)
	for i := range raw {
		raw[i] = podJSON(b, "payments", i)
	}
	for _, interned := range []bool{false, true} {
		name := "decoded"
		if interned {
			name = "interned"
		}
		b.Run(name, func(b *testing.B) {
			var perPod float64
			for b.Loop() {
				pods := make([]*corev1.Pod, n)
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for i := range pods {
					pods[i] = decode(b, raw[i]).(*corev1.Pod)
					pods[i].ManagedFields = nil
					if interned {
						if err := intern.Strings(pods[i]); err != nil {
							b.Fatal(err)
						}
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perPod = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
				runtime.KeepAlive(pods)
			}
			b.ReportMetric(perPod, "live-B/pod")
		})
	}
}
