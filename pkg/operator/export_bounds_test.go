package operator

// PodMemory is what r remembers of pods: the pods with retry keys of any
// kind (container starts, evictions), and the pods restartOnRefusal
// (refusals, pods without a controller reported) and replaceHarmed hold.
func PodMemory(r *Reconciler) (retried, evictions int) {
	r.evictMu.Lock()
	defer r.evictMu.Unlock()
	evictions = len(r.harmed)
	for _, e := range r.evictions {
		evictions += e.size()
	}
	return r.retries.pods(), evictions
}
