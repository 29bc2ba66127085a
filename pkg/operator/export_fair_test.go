package operator

// RetriedPods is the number of pods the operator keeps retry state for.
func RetriedPods(r *Reconciler) int { return r.retries.pods() }
