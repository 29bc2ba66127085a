package sdk

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMergeKeepsTheStrongestUnhandledChange(t *testing.T) {
	cases := []struct {
		prev, next, want EventType
	}{
		{"", EventAdd, EventAdd},
		{EventAdd, "", EventAdd},
		{EventAdd, EventUpdate, EventAdd},
		{EventAdd, EventResync, EventAdd},
		{EventUpdate, EventResync, EventUpdate},
		{EventResync, EventUpdate, EventUpdate},
		{EventAdd, EventDelete, EventDelete},
		{EventDelete, EventAdd, EventAdd},
		{EventUpdate, EventDelete, EventDelete},
	}
	for _, c := range cases {
		if got := merge(c.prev, c.next); got != c.want {
			t.Errorf("merge(%q, %q) = %q, want %q", c.prev, c.next, got, c.want)
		}
	}
}

func TestTrackerRecreateSupersedesDelete(t *testing.T) {
	tr := newTracker()
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "1"}}
	tr.observe("ns/a", EventDelete, old)
	if got, ok := tr.finalState("ns/a"); !ok || got != old {
		t.Fatalf("final state after delete = %v, %v", got, ok)
	}
	tr.observe("ns/a", EventAdd, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "2"}})
	if _, ok := tr.finalState("ns/a"); ok {
		t.Fatal("final state survived a re-create")
	}
	if typ, _ := tr.take("ns/a"); typ != EventAdd {
		t.Fatalf("type after delete+add = %q, want add", typ)
	}
}

func TestTrackerForgetKeepsANewerDelete(t *testing.T) {
	tr := newTracker()
	first := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "1"}}
	second := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "2"}}
	tr.observe("ns/a", EventDelete, first)
	tr.observe("ns/a", EventDelete, second)
	tr.forget("ns/a", first)
	if got, ok := tr.finalState("ns/a"); !ok || got != second {
		t.Fatalf("forgetting the handled delete dropped the newer one: %v %v", got, ok)
	}
	tr.forget("ns/a", second)
	if p, f := func() (int, int) { tr.take("ns/a"); return tr.size() }(); p != 0 || f != 0 {
		t.Fatalf("tracker holds %d pending, %d final after everything was handled", p, f)
	}
}

// TestTrackerIsSafeAndDoesNotLeakUnderConcurrency runs writers (the
// informer side) and readers (workers) at once; run it with -race.
func TestTrackerIsSafeAndDoesNotLeakUnderConcurrency(t *testing.T) {
	tr := newTracker()
	const keys, rounds = 50, 200
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range rounds {
				key := fmt.Sprintf("ns/k%d", (i+g)%keys)
				obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: key}}
				if i%3 == 0 {
					tr.observe(key, EventDelete, obj)
				} else {
					tr.observe(key, EventUpdate, obj)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := range rounds {
				key := fmt.Sprintf("ns/k%d", (i+g)%keys)
				typ, _ := tr.take(key)
				if f, ok := tr.finalState(key); ok {
					tr.forget(key, f)
				} else if typ != "" {
					tr.restore(key, typ)
					tr.take(key)
				}
			}
		}()
	}
	wg.Wait()
	// Drain as the workers would once the informer is quiet.
	for i := range keys {
		key := fmt.Sprintf("ns/k%d", i)
		tr.take(key)
		if f, ok := tr.finalState(key); ok {
			tr.forget(key, f)
		}
	}
	if p, f := tr.size(); p != 0 || f != 0 {
		t.Fatalf("tracker holds %d pending and %d final entries after draining, want 0", p, f)
	}
}

func TestTrackerGivesItsMemoryBackAfterABurst(t *testing.T) {
	const burst = 100_000 // an initial list of a large cache
	keys := make([]string, burst)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns/object-%06d", i)
	}
	tr := newTracker()
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	for _, k := range keys {
		tr.observe(k, EventAdd, nil)
	}
	during := heap()
	for _, k := range keys {
		if _, ok := tr.take(k); !ok {
			t.Fatalf("%s was not pending", k)
		}
	}
	after := heap()
	// The pending map's table for the burst is megabytes; what stays is
	// an empty map.
	if grown, kept := during-before, after-before; grown < 1<<20 || kept > grown/10 {
		t.Errorf("pending grew by %d bytes and kept %d once empty, want at most a tenth", grown, kept)
	}
	tr.observe("ns/again", EventUpdate, nil)
	if typ, ok := tr.take("ns/again"); !ok || typ != EventUpdate {
		t.Errorf("after the burst, take = %q, %v; want update", typ, ok)
	}
	runtime.KeepAlive(keys)
}
