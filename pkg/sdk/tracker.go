package sdk

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
)

// tracker remembers, per key, what happened since the key was last handled,
// the final state of deleted objects and how many handlings in a row
// failed. The informer's handlers write it and workers read it
// concurrently, hence the mutex. Entries live only while a key is queued or
// being retried, so it does not grow with the cluster, and its maps give
// their memory back once a burst is handled (see keyMap).
type tracker struct {
	mu       sync.Mutex
	pending  keyMap[EventType]
	final    keyMap[runtime.Object]
	failures keyMap[int]
}

func newTracker() *tracker {
	return &tracker{pending: newKeyMap[EventType](), final: newKeyMap[runtime.Object](), failures: newKeyMap[int]()}
}

// shrinkAbove is how many keys a keyMap must have held for it to be
// replaced once it is empty again.
const shrinkAbove = 256

// keyMap is a map by key that is replaced by a new, empty one when it
// empties after having held more than shrinkAbove keys. A Go map never
// gives back the table it grew, and the initial list of a watch puts every
// key of its cache in pending at once: 10,000 Pods left about 1.5 MB of
// empty table behind, for as long as the watch runs.
type keyMap[V any] struct {
	m    map[string]V
	peak int // the most keys held since the map was made
}

func newKeyMap[V any]() keyMap[V] { return keyMap[V]{m: map[string]V{}} }

func (k *keyMap[V]) get(key string) (V, bool) {
	v, ok := k.m[key]
	return v, ok
}

func (k *keyMap[V]) set(key string, v V) {
	k.m[key] = v
	k.peak = max(k.peak, len(k.m))
}

func (k *keyMap[V]) del(key string) {
	delete(k.m, key)
	if len(k.m) == 0 && k.peak > shrinkAbove {
		*k = newKeyMap[V]()
	}
}

// failed records a failed handling of key and returns how many handlings
// of it failed in a row. The count is the framework's own, so that
// WithMaxRetries works with any rate limiter.
func (t *tracker) failed(key string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, _ := t.failures.get(key)
	t.failures.set(key, n+1)
	return n + 1
}

// noFailure ends key's run of failed handlings.
func (t *tracker) noFailure(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failures.del(key)
}

// observe records a notification for key. A delete keeps obj as the final
// state; anything else means the object exists again, which supersedes an
// unhandled delete.
func (t *tracker) observe(key string, typ EventType, obj runtime.Object) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if typ == EventDelete {
		t.final.set(key, obj)
	} else {
		t.final.del(key)
	}
	prev, _ := t.pending.get(key)
	t.pending.set(key, merge(prev, typ))
}

// touch records that key was enqueued for a reason other than its own
// notification (an owned object changed).
func (t *tracker) touch(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	prev, _ := t.pending.get(key)
	t.pending.set(key, merge(prev, EventUpdate))
}

// take returns and clears what happened to key since it was last handled.
func (t *tracker) take(key string) (EventType, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	typ, ok := t.pending.get(key)
	t.pending.del(key)
	return typ, ok
}

// restore puts back a type taken by a handling that will be retried, so the
// retry reports the same change unless a newer one arrived.
func (t *tracker) restore(key string, typ EventType) {
	t.mu.Lock()
	defer t.mu.Unlock()
	newer, _ := t.pending.get(key)
	t.pending.set(key, merge(typ, newer))
}

// finalState returns the final state of a deleted key.
func (t *tracker) finalState(key string) (runtime.Object, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.final.get(key)
}

// forget drops the final state of key once its delete was handled, unless
// a newer delete replaced it in the meantime.
func (t *tracker) forget(key string, handled runtime.Object) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if obj, _ := t.final.get(key); obj == handled {
		t.final.del(key)
	}
}

// forgetPending drops the pending type of a key that is given up on.
func (t *tracker) forgetPending(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending.del(key)
}

// size reports how many keys hold state, for leak tests. Failure counts
// count as pending.
func (t *tracker) size() (pending, final int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending.m) + len(t.failures.m), len(t.final.m)
}

// merge combines an unhandled change with a newer one. A resync adds
// nothing to a real change, and an add not yet seen by the handler stays an
// add through later updates; otherwise the newer change wins.
func merge(prev, next EventType) EventType {
	switch {
	case prev == "":
		return next
	case next == "":
		return prev
	case next == EventResync:
		return prev
	case prev == EventAdd && next == EventUpdate:
		return EventAdd
	}
	return next
}
