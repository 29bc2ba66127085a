package operator

import (
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

// StatusDelay is how long a change of an exporter's status that is neither
// a new generation nor a new verdict waits before it is written: a count, a
// condition's message, Ready turning, which endpoints the sample lists. The
// write carries the state of that moment, so the changes within the delay
// cost one write, and a state that lasts less than the delay (a container
// that restarts and is injected again at once) costs none. A new container
// start recorded for an endpoint the sample lists (sampleOnly) is written at
// once, so that the status never names a container that no longer runs for
// longer than it takes to record the new one, unless the exporter's status
// was written within the last StatusDelay: then StatusDelay after that
// write, with every start recorded meanwhile.
const StatusDelay = 5 * time.Second

// endpointSample is the status' bounded sample of endpoints: sorted by pod,
// then port, at most jmxv1alpha1.MaxStatusEndpoints of them, and how many
// there are in all. It sorts endpoints in place.
func endpointSample(endpoints []jmxv1alpha1.MetricsEndpoint) ([]jmxv1alpha1.MetricsEndpoint, int32) {
	sort.Slice(endpoints, func(i, j int) bool {
		a, b := endpoints[i], endpoints[j]
		return a.Pod < b.Pod || a.Pod == b.Pod && a.Port < b.Port
	})
	n := len(endpoints)
	if n > jmxv1alpha1.MaxStatusEndpoints {
		endpoints = endpoints[:jmxv1alpha1.MaxStatusEndpoints:jmxv1alpha1.MaxStatusEndpoints]
	}
	return endpoints, int32(n)
}

// nameSample is the status' bounded sample of pod names: sorted, at most
// jmxv1alpha1.MaxStatusEndpoints, and how many there are in all. It sorts
// names in place.
func nameSample(names []string) ([]string, int32) {
	sort.Strings(names)
	n := len(names)
	if n > jmxv1alpha1.MaxStatusEndpoints {
		names = names[:jmxv1alpha1.MaxStatusEndpoints:jmxv1alpha1.MaxStatusEndpoints]
	}
	return names, int32(n)
}

// statusChange is how a computed status differs from the stored one.
type statusChange int

const (
	// unchanged: nothing to write.
	unchanged statusChange = iota
	// sampleOnly: only the details of the sample's entries differ (a
	// container start's ID, pid and times: a restart recorded): written at
	// once, or StatusDelay after the exporter's last write when that was
	// more recent.
	sampleOnly
	// coalesced: something a user reads changed (a count, a message, Ready,
	// which endpoints the sample lists): written StatusDelay after it was
	// first seen, with the state of then.
	coalesced
	// urgent: a new generation, a condition other than Ready turning or
	// changing its reason, the circuit breaker, a rejected config, a
	// proven change or restartOnRefusal's state (state the operator itself relies on across restarts):
	// written at once.
	urgent
)

// changeOf classifies the change from old to st.
func changeOf(old, st *jmxv1alpha1.PrometheusJmxExporterStatus) statusChange {
	if equality.Semantic.DeepEqual(old, st) {
		return unchanged
	}
	if old.ObservedGeneration != st.ObservedGeneration ||
		!equality.Semantic.DeepEqual(old.CircuitBreaker, st.CircuitBreaker) ||
		!equality.Semantic.DeepEqual(old.RejectedConfig, st.RejectedConfig) ||
		!equality.Semantic.DeepEqual(old.Proven, st.Proven) ||
		!equality.Semantic.DeepEqual(old.RestartOnRefusal, st.RestartOnRefusal) ||
		!equality.Semantic.DeepEqual(old.AtStartCanary, st.AtStartCanary) ||
		len(old.Conditions) != len(st.Conditions) {
		return urgent
	}
	for _, c := range st.Conditions {
		o := findCondition(old.Conditions, c.Type)
		if o == nil || c.Type != jmxv1alpha1.ConditionReady && (o.Status != c.Status || o.Reason != c.Reason) {
			return urgent
		}
	}
	if equality.Semantic.DeepEqual(withoutSampleDetails(old), withoutSampleDetails(st)) {
		return sampleOnly
	}
	return coalesced
}

// withoutSampleDetails is st with the sample's entries reduced to what
// does not change when a container restarts and is injected again.
func withoutSampleDetails(st *jmxv1alpha1.PrometheusJmxExporterStatus) *jmxv1alpha1.PrometheusJmxExporterStatus {
	out := *st
	out.MetricsEndpoints = make([]jmxv1alpha1.MetricsEndpoint, len(st.MetricsEndpoints))
	for i, e := range st.MetricsEndpoints {
		e.ContainerID, e.PID, e.JVMStartedAt, e.InjectedAt = "", 0, nil, metav1.Time{}
		out.MetricsEndpoints[i] = e
	}
	return &out
}

// statusPacer decides, per exporter (namespace/name), when a computed status
// is written (StatusDelay). Its zero value is ready to use. What it
// remembers of an exporter is the exporter's pace, in its exporterMemory
// (the Reconciler's memory; a pacer without one keeps its own).
type statusPacer struct {
	mu sync.Mutex
	// delay is StatusDelay unless a test set another.
	delay time.Duration
	// memory holds the exporters' pace: the Reconciler's memory, or own
	// when nil.
	memory *exporterMemories
	own    exporterMemories
}

// pace is what the status pacer remembers of one exporter.
type pace struct {
	// since is when a change not yet written was first seen (zero: none).
	since time.Time
	// last is when the exporter's status was last written (zero: never);
	// startsWait says that its recorded container starts wait for
	// StatusDelay after that write.
	last       time.Time
	startsWait bool
}

// paces is where the pacer keeps the exporters' pace.
func (s *statusPacer) paces() *exporterMemories {
	if s.memory != nil {
		return s.memory
	}
	return &s.own
}

// due says whether a status whose change from the stored one is c should be
// written now, or else how long until it should be looked at again (0:
// never, nothing waits).
func (s *statusPacer) due(key string, c statusChange, now time.Time) (write bool, wait time.Duration) {
	s.mu.Lock()
	delay := s.delay
	s.mu.Unlock()
	if delay == 0 {
		delay = StatusDelay
	}
	s.paces().with(key, func(m *exporterMemory) { write, wait = m.pace.due(c, now, delay) })
	return write, wait
}

// due is statusPacer.due for one exporter's pace.
func (pc *pace) due(c statusChange, now time.Time, delay time.Duration) (bool, time.Duration) {
	switch c {
	case urgent:
		return true, 0
	case unchanged:
		pc.since, pc.startsWait = time.Time{}, false
		return false, 0
	case sampleOnly:
		// The change that started a wait went away: only the new starts
		// are left to write.
		pc.since = time.Time{}
		if !pc.last.IsZero() {
			if left := pc.last.Add(delay).Sub(now); left > 0 {
				pc.startsWait = true
				return false, left
			}
		}
		return true, 0
	}
	if pc.since.IsZero() {
		pc.since = now
	}
	if left := pc.since.Add(delay).Sub(now); left > 0 {
		return false, left
	}
	return true, 0
}

// wrote says that key's status was written at now: the changes seen so far
// are in.
func (s *statusPacer) wrote(key string, now time.Time) {
	s.paces().with(key, func(m *exporterMemory) { m.pace = pace{last: now} })
}
