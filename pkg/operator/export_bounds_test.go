package operator

// PodMemory is what r remembers of pods: the pods with retry keys of any
// kind (container starts, evictions), and the entries of restartOnRefusal's
// memory (refusals, pods without a controller reported).
func PodMemory(r *Reconciler) (retried, evictions int) {
	r.evictionsMu.Lock()
	defer r.evictionsMu.Unlock()
	for _, e := range r.evictions {
		evictions += e.size()
	}
	return r.retries.pods(), evictions
}
