package sdk

import (
	"fmt"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
)

// BenchmarkTransformPod is the cache transform's CPU and allocations for
// one Pod as the API server sends it (two field managers, a Deployment's
// replica), by default (compact, interned), WithoutCompaction, and also
// WithoutStringInterning. Each iteration transforms a fresh deep copy,
// since the transform changes its input, so the copy is part of every
// figure: the differences are the compaction and the interning. The
// copies take turns at 100 uids, as 100 replicas would, since strings are
// interned once a second object holds them.
func BenchmarkTransformPod(b *testing.B) {
	// The Pod the intern package's tests use, read from a real API server.
	data, err := os.ReadFile("internal/intern/testdata/pod.json")
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
		{"WithoutCompaction", informerKey{keepDecoded: true}},
		{"WithoutCompaction,WithoutStringInterning", informerKey{keepDecoded: true, keepStrings: true}},
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
