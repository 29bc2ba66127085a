package operator

// PodMemory is what r remembers of pods: the pods with retry keys of any
// kind (container starts, evictions), and the entries of restartOnRefusal's
// memory (refusals, pods without a controller reported).
func PodMemory(r *Reconciler) (retried, evictions int) {
	r.memory.each(func(m *exporterMemory) {
		if m.evictions != nil {
			evictions += m.evictions.size()
		}
	})
	return r.retries.pods(), evictions
}
