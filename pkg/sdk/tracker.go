package sdk

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
)

// tracker remembers, per key, what happened since the key was last handled,
// the final state of deleted objects and how many handlings in a row
// failed. The informer's handlers write it and workers read it
// concurrently, hence the mutex. Entries live only while a key is queued or
// being retried, so it does not grow with the cluster.
type tracker struct {
	mu       sync.Mutex
	pending  map[string]EventType
	final    map[string]runtime.Object
	failures map[string]int
}

func newTracker() *tracker {
	return &tracker{pending: map[string]EventType{}, final: map[string]runtime.Object{}, failures: map[string]int{}}
}

// failed records a failed handling of key and returns how many handlings
// of it failed in a row. The count is the framework's own, so that
// WithMaxRetries works with any rate limiter.
func (t *tracker) failed(key string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failures[key]++
	return t.failures[key]
}

// noFailure ends key's run of failed handlings.
func (t *tracker) noFailure(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.failures, key)
}

// observe records a notification for key. A delete keeps obj as the final
// state; anything else means the object exists again, which supersedes an
// unhandled delete.
func (t *tracker) observe(key string, typ EventType, obj runtime.Object) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if typ == EventDelete {
		t.final[key] = obj
	} else {
		delete(t.final, key)
	}
	t.pending[key] = merge(t.pending[key], typ)
}

// touch records that key was enqueued for a reason other than its own
// notification (an owned object changed).
func (t *tracker) touch(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending[key] = merge(t.pending[key], EventUpdate)
}

// take returns and clears what happened to key since it was last handled.
func (t *tracker) take(key string) (EventType, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	typ, ok := t.pending[key]
	delete(t.pending, key)
	return typ, ok
}

// restore puts back a type taken by a handling that will be retried, so the
// retry reports the same change unless a newer one arrived.
func (t *tracker) restore(key string, typ EventType) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending[key] = merge(typ, t.pending[key])
}

// finalState returns the final state of a deleted key.
func (t *tracker) finalState(key string) (runtime.Object, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	obj, ok := t.final[key]
	return obj, ok
}

// forget drops the final state of key once its delete was handled, unless
// a newer delete replaced it in the meantime.
func (t *tracker) forget(key string, handled runtime.Object) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.final[key] == handled {
		delete(t.final, key)
	}
}

// forgetPending drops the pending type of a key that is given up on.
func (t *tracker) forgetPending(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.pending, key)
}

// size reports how many keys hold state, for leak tests. Failure counts
// count as pending.
func (t *tracker) size() (pending, final int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending) + len(t.failures), len(t.final)
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
