package sdk

import (
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
)

// BenchmarkNotifyUpdate is what the informer's notification of one Pod
// update costs a watch before its key is queued: with no predicate, with
// GenerationChanged (which reads metadata only), and with a predicate of
// the user's (which gets the objects decoded). The Pods are cached compact,
// as the cache's transform leaves them; the update changes the status, not
// the generation, so GenerationChanged drops it.
func BenchmarkNotifyUpdate(b *testing.B) {
	data, err := os.ReadFile("internal/compact/testdata/pod.json")
	if err != nil {
		b.Fatal(err)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	si := &sharedInformer{gvk: corev1.SchemeGroupVersion.WithKind("Pod")}
	oldPod := obj.(*corev1.Pod).DeepCopy()
	newPod := oldPod.DeepCopy()
	newPod.ResourceVersion += "1"
	newPod.Status.Message = "changed"
	oldEntry, err := si.transform(oldPod)
	if err != nil {
		b.Fatal(err)
	}
	newEntry, err := si.transform(newPod)
	if err != nil {
		b.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	hm, err := newHandlerMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	op := &Operator{cfg: config{log: log}, hmetrics: hm}
	for _, tc := range []struct {
		name string
		ps   []Predicate
	}{
		{"none", nil},
		{"GenerationChanged", []Predicate{GenerationChanged()}},
		{"user", []Predicate{func(_ runtime.Object, e Event) bool { _ = e.Object.(*corev1.Pod).Spec; return false }}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			w := &watch{op: op, name: "pods", cfg: watchConfig{predicates: tc.ps}}
			r := &watchRun{w: w, tracker: newTracker(), queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
			defer r.queue.ShutDown()
			b.ReportAllocs()
			for b.Loop() {
				r.notify(EventUpdate, oldEntry, newEntry)
			}
			if r.queue.Len() > 1 {
				b.Fatal(fmt.Sprintf("queue holds %d keys", r.queue.Len()))
			}
		})
	}
}

func TestReadyMadePredicatesReadCacheEntriesWithoutDecoding(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	hm, err := newHandlerMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	op := &Operator{cfg: config{log: log}, hmetrics: hm}
	si := &sharedInformer{gvk: corev1.SchemeGroupVersion.WithKind("Pod")}
	entry := func(gen int64, rv, msg string) any {
		p := &corev1.Pod{}
		p.Namespace, p.Name, p.Generation, p.ResourceVersion = "ns", "p", gen, rv
		p.Spec.Containers = []corev1.Container{{Name: "c", Image: "img"}}
		p.Status.Message = msg
		e, err := si.transform(p)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	// The same for a metadata-only cache, whose entries are Decoded.
	metaSI := &sharedInformer{key: informerKey{metadataOnly: true}, gvk: corev1.SchemeGroupVersion.WithKind("Pod")}
	metaEntry := func(gen int64, rv string) any {
		m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Generation: gen, ResourceVersion: rv}}
		e, err := metaSI.transform(m)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	for _, entries := range [][3]any{
		{entry(1, "1", "a"), entry(1, "2", "b"), entry(2, "3", "b")},
		{metaEntry(1, "1"), metaEntry(1, "2"), metaEntry(2, "3")},
	} {
		testReadyMadePredicatesOn(t, op, entries[0], entries[1], entries[2])
	}
	if metadataOnly([]Predicate{And(GenerationChanged(), func(runtime.Object, Event) bool { return true })}) {
		t.Error("an And with a PredicateFunc was taken for a metadata predicate")
	}
}

// testReadyMadePredicatesOn checks that ready-made predicates drop a
// status-only update (old → statusOnly) of cache entries without
// allocating, and pass a spec change (statusOnly → specChange).
func testReadyMadePredicatesOn(t *testing.T, op *Operator, old, statusOnly, specChange any) {
	t.Helper()
	for _, ps := range [][]Predicate{
		{GenerationChanged()},
		{IgnoreResync(), And(Not(LabelsChanged()), Or(GenerationChanged(), AnnotationsChanged()))},
	} {
		if !metadataOnly(ps) {
			t.Fatalf("%v: not recognised as reading metadata only", ps)
		}
		w := &watch{op: op, name: "pods", cfg: watchConfig{predicates: ps}}
		r := &watchRun{w: w, tracker: newTracker(), queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
		// A status-only update is dropped without a single allocation:
		// nothing was decoded.
		if allocs := testing.AllocsPerRun(100, func() { r.notify(EventUpdate, old, statusOnly) }); allocs != 0 {
			t.Errorf("a dropped notification allocated %v times, want 0 (no decode)", allocs)
		}
		if r.queue.Len() != 0 {
			t.Errorf("a status-only update was enqueued")
		}
		r.notify(EventUpdate, statusOnly, specChange)
		if r.queue.Len() != 1 {
			t.Errorf("a spec change left %d keys queued, want 1", r.queue.Len())
		}
		r.queue.ShutDown()
	}
}

// TestOnlyReadyMadePredicatesAreTakenForMetadataOnes checks the rule behind
// the decode-free path: a function of the user's, even one that calls a
// ready-made predicate, is never run on a cache entry, while the ready-made
// predicates and And, Or and Not of them only are.
func TestOnlyReadyMadePredicatesAreTakenForMetadataOnes(t *testing.T) {
	gen := GenerationChanged()
	user := Predicate(func(old runtime.Object, e Event) bool { return gen(old, e) })
	for name, c := range map[string]struct {
		ps   []Predicate
		want bool
	}{
		"ready-made":            {[]Predicate{GenerationChanged(), LabelsChanged(), IgnoreResync()}, true},
		"composed ready-made":   {[]Predicate{Not(Or(AnnotationsChanged(), And(gen, LabelsOrAnnotationsChanged())))}, true},
		"user's":                {[]Predicate{user}, false},
		"ready-made and user's": {[]Predicate{gen, user}, false},
		"Or with a user's":      {[]Predicate{Or(gen, user)}, false},
		"Not of a user's":       {[]Predicate{Not(user)}, false},
		"nil":                   {[]Predicate{nil}, false},
	} {
		if got := metadataOnly(c.ps); got != c.want {
			t.Errorf("%s: metadataOnly = %v, want %v", name, got, c.want)
		}
	}
}
