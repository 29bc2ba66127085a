package probe

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// StampAnnotation carries the wall-clock time (Unix nanoseconds) at which the
// load generator sent an update, so that the handler can tell how long the
// update took to reach it.
const StampAnnotation = "bench.handlerkit.dev/sent"

// MaxGeneration is the highest generation the Recorder tracks; the churn
// workload creates objects (generation 1) and updates them once
// (generation 2).
const MaxGeneration = 2

// Recorder follows the N benchmark objects (named "<prefix>-<index>")
// through a contender's handler. Handlers call Called when they start on an
// object and Handled when they have finished its work; both are safe for
// concurrent use and cost a few atomic operations.
type Recorder struct {
	n         int
	since     int64          // stamps older than this (Unix ns) are not samples
	gen       []atomic.Int64 // highest generation finished, per object
	stamp     []atomic.Int64 // newest update stamp seen, per object
	reached   [MaxGeneration + 1]atomic.Int64
	calls     atomic.Int64
	failures  atomic.Int64
	first     atomic.Bool
	onFirst   func(time.Time)
	onReached func(gen int64, at time.Time)

	mu      sync.Mutex
	samples []time.Duration
}

// NewRecorder follows n objects. onFirst runs once, on the first handler
// call; onReached runs once per generation g when all n objects have been
// handled at generation g or later. Either may be nil.
func NewRecorder(n int, onFirst func(time.Time), onReached func(gen int64, at time.Time)) *Recorder {
	return &Recorder{
		n: n, since: time.Now().UnixNano(), gen: make([]atomic.Int64, n), stamp: make([]atomic.Int64, n),
		onFirst: onFirst, onReached: onReached,
	}
}

// Called records that a handler started on the object name, whose update
// stamp (see Stamp) is stamp or 0. The first call with a new stamp adds a
// latency sample: the time from the update being sent to this call. Stamps
// older than the Recorder, left by an earlier process, are ignored.
func (r *Recorder) Called(name string, stamp int64) {
	now := time.Now()
	r.calls.Add(1)
	if r.first.CompareAndSwap(false, true) && r.onFirst != nil {
		r.onFirst(now)
	}
	i, ok := r.index(name)
	if !ok || stamp < r.since {
		return
	}
	for {
		old := r.stamp[i].Load()
		if stamp <= old {
			return
		}
		if r.stamp[i].CompareAndSwap(old, stamp) {
			break
		}
	}
	r.mu.Lock()
	r.samples = append(r.samples, now.Sub(time.Unix(0, stamp)))
	r.mu.Unlock()
}

// Handled records that the handler finished its work on name as of
// generation (objects without a generation count as generation 1).
func (r *Recorder) Handled(name string, generation int64) {
	i, ok := r.index(name)
	if !ok {
		return
	}
	generation = max(generation, 1)
	for {
		old := r.gen[i].Load()
		if generation <= old {
			return
		}
		if r.gen[i].CompareAndSwap(old, generation) {
			r.crossed(old, generation)
			return
		}
	}
}

// crossed counts the object for every tracked generation in (old, now].
func (r *Recorder) crossed(old, now int64) {
	for g := old + 1; g <= min(now, MaxGeneration); g++ {
		if r.reached[g].Add(1) == int64(r.n) && r.onReached != nil {
			r.onReached(g, time.Now())
		}
	}
}

// Failed records that a handler call returned an error (to be retried).
func (r *Recorder) Failed() { r.failures.Add(1) }

// Failures is the number of failed handler calls so far.
func (r *Recorder) Failures() int64 { return r.failures.Load() }

// Calls is the number of handler calls so far.
func (r *Recorder) Calls() int64 { return r.calls.Load() }

// Samples returns the latency samples recorded so far.
func (r *Recorder) Samples() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.samples...)
}

// index parses the number after the last '-' of a benchmark object's name.
func (r *Recorder) index(name string) (int, bool) {
	dash := strings.LastIndexByte(name, '-')
	if dash < 0 {
		return 0, false
	}
	i, err := strconv.Atoi(name[dash+1:])
	if err != nil || i < 0 || i >= r.n {
		return 0, false
	}
	return i, true
}

// Stamp returns the update stamp in annotations, or 0.
func Stamp(annotations map[string]string) int64 {
	s, ok := annotations[StampAnnotation]
	if !ok {
		return 0
	}
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}
