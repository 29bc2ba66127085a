package operator

// SetBeforeGate makes r call f in each look at an exporter, between reading
// its pods and gating its jobs. Set it before the operator runs.
func SetBeforeGate(r *Reconciler, f func(exporter string)) { r.beforeGate = f }

// PodBusy says whether a job on the pod with uid is queued or running.
func PodBusy(r *Reconciler, uid string) bool { return r.pool.Busy(uid) }
