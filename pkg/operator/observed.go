package operator

// observed.go is what a look at an exporter gathers before it plans: the
// clock, the pool's busy pods and the exporter's canary. The planning steps
// (observe, judge, planPod, claimedAtStart, gate, attachTrying) read them
// from the plan, never the clock, the pool or the Reconciler's memory, so
// that a test plans with a fixed clock.

import "time"

// observed is what planning reads of the world besides the pods and their
// records.
type observed struct {
	// now is the look's clock: every "how long ago" and "until when" of
	// the planning counts from it.
	now time.Time
	// busy says whether a job on the pod with uid is queued or running
	// (the pool; a fixed set in a test).
	busy func(uid string) bool
	// canary is the exporter's canary as read (canaryNow), nil when none;
	// canaryBusy says whether its job was queued or running then.
	canary     *canaryJob
	canaryBusy bool
}

// gather reads the clock, the pool and exporter's canary for a look.
func (r *Reconciler) gather(exporter string) observed {
	o := observed{now: time.Now(), busy: r.pool.Busy}
	o.canary, o.canaryBusy = r.canaryNow(exporter)
	return o
}

// canaryNow is a copy of exporter's canary (nil when none) and whether its
// job is queued or running, read together under the memory's lock (a
// canary's job records how it ended, canaryEnded, before the pool lets it
// go).
func (r *Reconciler) canaryNow(exporter string) (*canaryJob, bool) {
	var c *canaryJob
	busy := false
	r.memory.with(exporter, func(m *exporterMemory) {
		if m.canary != nil {
			cp := *m.canary
			c, busy = &cp, r.pool.Busy(cp.uid)
		}
	})
	return c, busy
}

// gateNow gates the plan's jobs (gate) with exporter's canary as it is
// now, after the pods were read, and forgets a canary that gate found no
// longer holding the change back.
func (r *Reconciler) gateNow(exporter string, p *plan) {
	p.obs.canary, p.obs.canaryBusy = r.canaryNow(exporter)
	r.gate(p)
	if p.dropCanary != nil {
		r.dropCanary(exporter, *p.dropCanary)
	}
}

// dropCanary forgets exporter's canary when it is still c (gate decided
// from c that it no longer holds the change back).
func (r *Reconciler) dropCanary(exporter string, c canaryJob) {
	r.memory.with(exporter, func(m *exporterMemory) {
		if m.canary != nil && *m.canary == c {
			m.canary = nil
		}
	})
}
