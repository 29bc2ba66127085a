package operator

// exportermemory.go is what the Reconciler keeps in memory of each exporter:
// one exporterMemory per exporter in one map under one lock, so that
// forgetting an exporter is deleting its entry (forgetExporter, memory.go).

import "sync"

// exporterMemory is what the Reconciler remembers of one exporter
// (namespace/name) between its looks. Its fields are guarded by
// exporterMemories.mu.
//
// What stays outside, and why: the metrics and condition series are
// Prometheus series in a registry, which forgetting must unregister
// (metrics.forgetExporter, conditionMetric.forget), not a map to drop;
// forgetExporter unregisters them next to deleting the entry.
type exporterMemory struct {
	// canary is the exporter's job that tries a change first (canary.go,
	// gate), nil when none.
	canary *canaryJob
	// refused is the last status the API server refused as invalid, so
	// that the same status is never sent again (exporterstatus.go), nil
	// when none.
	refused *refusal
	// evictions is restartOnRefusal's memory (evict.go), nil when off. The
	// pointer is guarded by exporterMemories.mu, its contents by its own
	// lock (evictions.mu).
	evictions *evictions
	// pace is the status pacer's memory of the exporter (statusPacer,
	// status.go).
	pace pace
}

// empty says whether m remembers nothing.
func (m *exporterMemory) empty() bool {
	return m.canary == nil && m.refused == nil && m.evictions == nil && m.pace == pace{}
}

// exporterMemories is the exporters' memory. Its zero value is ready to use.
type exporterMemories struct {
	mu sync.Mutex
	m  map[string]*exporterMemory
}

// of returns exporter's memory, created when missing. ms.mu must be held;
// tidy drops it again when it is left empty.
func (ms *exporterMemories) of(exporter string) *exporterMemory {
	if ms.m == nil {
		ms.m = map[string]*exporterMemory{}
	}
	m, ok := ms.m[exporter]
	if !ok {
		m = &exporterMemory{}
		ms.m[exporter] = m
	}
	return m
}

// tidy drops exporter's memory when it remembers nothing. ms.mu must be
// held.
func (ms *exporterMemories) tidy(exporter string) {
	if m, ok := ms.m[exporter]; ok && m.empty() {
		delete(ms.m, exporter)
	}
}

// with runs f on exporter's memory under the lock.
func (ms *exporterMemories) with(exporter string, f func(*exporterMemory)) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	f(ms.of(exporter))
	ms.tidy(exporter)
}

// each runs f on every exporter's memory under the lock.
func (ms *exporterMemories) each(f func(*exporterMemory)) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for _, m := range ms.m {
		f(m)
	}
}

// forget drops everything remembered of exporter.
func (ms *exporterMemories) forget(exporter string) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	delete(ms.m, exporter)
}

// size is the number of exporters remembered.
func (ms *exporterMemories) size() int {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return len(ms.m)
}
