package operator

// retries.go is the backoff of transient failures, per container start and
// per pod, and the operator's one retry policy (backoff).

import (
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// retries remembers transient failures per container start, for backoff, by
// pod: a pod's entries go with the pod (pruneIfGone), and those of its
// containers' earlier starts at the next plan of the pod (keepOnly).
type retries struct {
	mu sync.Mutex
	m  map[string]map[string]retry // pod UID -> container/containerID -> retry
}

type retry struct {
	attempts int
	next     time.Time
}

func newRetries() *retries { return &retries{m: map[string]map[string]retry{}} }

func retryKey(pod *corev1.Pod, container, containerID string) string {
	return string(pod.UID) + "/" + container + "/" + containerID
}

// splitRetryKey splits a retryKey (or an evictKey, evict.go: every key
// starts with the pod's UID, so that pruneIfGone drops them all) into the
// pod's UID and the rest.
func splitRetryKey(key string) (string, string) {
	uid, rest, _ := strings.Cut(key, "/")
	return uid, rest
}

// wait is how long until key may be tried again (0: now).
func (r *retries) wait(key string) time.Duration {
	uid, rest := splitRetryKey(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	if d := time.Until(r.m[uid][rest].next); d > 0 {
		return d
	}
	return 0
}

// failed records a transient failure and returns the backoff (backoff).
func (r *retries) failed(key string) time.Duration {
	uid, rest := splitRetryKey(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	pod := r.m[uid]
	if pod == nil {
		pod = map[string]retry{}
		r.m[uid] = pod
	}
	e := pod[rest]
	d := backoff(e.attempts)
	e.attempts++
	e.next = time.Now().Add(d)
	pod[rest] = e
	return d
}

func (r *retries) forget(key string) {
	uid, rest := splitRetryKey(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m[uid], rest)
	if len(r.m[uid]) == 0 {
		delete(r.m, uid)
	}
}

// hasPod says whether the pod with uid has entries.
func (r *retries) hasPod(uid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.m[uid]
	return ok
}

// forgetPod drops every entry of the pod with uid.
func (r *retries) forgetPod(uid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, uid)
}

// keepOnly drops the pod's entries of container starts other than the
// current ones (statuses): a restarted container's earlier start is never
// tried again. The pod's eviction backoff (evictKey) stays.
func (r *retries) keepOnly(pod *corev1.Pod, statuses []corev1.ContainerStatus) {
	uid := string(pod.UID)
	r.mu.Lock()
	defer r.mu.Unlock()
	entries, ok := r.m[uid]
	if !ok {
		return
	}
	current := make(map[string]bool, len(statuses))
	for _, cs := range statuses {
		_, rest := splitRetryKey(retryKey(pod, cs.Name, cs.ContainerID))
		current[rest] = true
	}
	for k := range entries {
		if !current[k] && k != evictRetry {
			delete(entries, k)
		}
	}
	if len(entries) == 0 {
		delete(r.m, uid)
	}
}

// pods is the number of pods with entries.
func (r *retries) pods() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// backoff is the operator's one retry policy: the wait after a transient
// failure that follows attempts earlier ones, 2s doubling to 5m.
func backoff(attempts int) time.Duration {
	return min(2*time.Second<<min(attempts, 8), 5*time.Minute)
}
