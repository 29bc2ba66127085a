package sdk

import (
	"fmt"
	"os"
	goruntime "runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
)

// BenchmarkTransformPod is the cache transform's CPU and allocations for
// one Pod as the API server sends it (two field managers, a Deployment's
// replica). Each iteration transforms a fresh deep copy, since the
// transform changes its input, so the copy is part of the figure.
func BenchmarkTransformPod(b *testing.B) {
	// The Pod the compact package's tests use, read from a real API server.
	data, err := os.ReadFile("internal/compact/testdata/pod.json")
	if err != nil {
		b.Fatal(err)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	pod := obj.(*corev1.Pod)
	uids := make([]types.UID, 100)
	for i := range uids {
		uids[i] = types.UID(fmt.Sprintf("0b1c2d3e-4f50-6172-8394-%012d", i))
	}
	for _, tc := range []struct {
		name string
		key  informerKey
	}{
		{"default", informerKey{}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			si := &sharedInformer{key: tc.key, gvk: corev1.SchemeGroupVersion.WithKind("Pod")}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				p := pod.DeepCopy()
				p.UID = uids[i%len(uids)]
				i++
				if _, err := si.transform(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCachedPodMemory is the live heap that 2,000 cached Pods of one
// Deployment hold, per Pod, as the cache's transform leaves them. Each Pod
// is decoded from its own protobuf encoding, with its own name, uid and
// IP, so that it holds its own strings as a Pod read from the wire does.
func BenchmarkCachedPodMemory(b *testing.B) {
	const n = 2000
	data, err := os.ReadFile("internal/compact/testdata/pod.json")
	if err != nil {
		b.Fatal(err)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	wire := make([][]byte, n)
	for i := range wire {
		p := obj.(*corev1.Pod).DeepCopy()
		p.Name = fmt.Sprintf("%s-%05d", p.Name, i)
		p.UID = types.UID(fmt.Sprintf("0b1c2d3e-4f50-6172-8394-%012d", i))
		p.Status.PodIP = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		if wire[i], err = p.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		key  informerKey
	}{
		{"default", informerKey{}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			si := &sharedInformer{key: tc.key, gvk: corev1.SchemeGroupVersion.WithKind("Pod")}
			var perPod float64
			for b.Loop() {
				cached := make([]any, n)
				goruntime.GC()
				var before, after goruntime.MemStats
				goruntime.ReadMemStats(&before)
				for i := range cached {
					p := &corev1.Pod{}
					if err := p.Unmarshal(wire[i]); err != nil {
						b.Fatal(err)
					}
					if cached[i], err = si.transform(p); err != nil {
						b.Fatal(err)
					}
				}
				goruntime.GC()
				goruntime.ReadMemStats(&after)
				perPod = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
				goruntime.KeepAlive(cached)
			}
			b.ReportMetric(perPod, "live-B/pod")
		})
	}
}
