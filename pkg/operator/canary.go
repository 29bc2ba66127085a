package operator

// canary.go is gate and the canary: a change reaches one container first,
// and the others once a JVM has run it for the breaker window.

import (
	"fmt"
	"sort"
	"time"
)

// gate lets a change through one container at a time: until a JVM has run
// the exporter's current generation and config for the breaker window, at
// most one job (of one container) runs, and none while a load under them is
// younger than the window. A config that kills a JVM, or that the agent
// refuses, so reaches one container, not every one.
//
// gate is a function of the plan and what the look gathered (p.obs: the
// clock, the pool, the canary as read after the pods); a canary it finds no
// longer holding the change back is left in p.dropCanary for plan to
// forget.
func (r *Reconciler) gate(p *plan) {
	if p.proven {
		return
	}
	now := p.obs.now
	p.attachTrying = attachTrying(p)
	if !p.landedAt.IsZero() {
		// The look that finds the load run for the window writes
		// status.proven (and drops the attach claim): it must come even
		// when nothing else is left to do.
		p.retryIn = minPositive(p.retryIn, max(p.landedAt.Add(r.opts.BreakerWindow).Sub(now)+time.Second, time.Second))
	}
	if len(p.jobs) == 0 {
		return
	}
	if p.atStartClaimed {
		// A pod being created tries the change at start: its outcome
		// decides for the attached ones too.
		p.held = "the change is being tried on one pod, given the agent at its start, first"
		p.retryIn = minPositive(p.retryIn, 10*time.Second)
		p.jobs = nil
		return
	}
	if !p.landedAt.IsZero() {
		wait := p.landedAt.Add(r.opts.BreakerWindow).Sub(now) + time.Second
		p.held = fmt.Sprintf("the change is being tried on one container until %s", p.landedAt.Add(r.opts.BreakerWindow).UTC().Format(time.RFC3339))
		p.retryIn = minPositive(p.retryIn, max(wait, time.Second))
		p.jobs = nil
		return
	}
	if len(p.trying) > 0 {
		// Only the pod whose attempt failed is tried again, on its backoff.
		p.held = "the change is being tried on one container first"
		var keep []*job
		for _, j := range p.jobs {
			if p.trying[j.pod.Name] && len(keep) == 0 {
				j.tasks, j.canary = j.tasks[:1], true
				keep = append(keep, j)
			}
		}
		p.jobs = keep
		p.retryIn = minPositive(p.retryIn, r.opts.BreakerWindow)
		return
	}
	if c := p.obs.canary; c != nil {
		switch {
		case p.canaryRunning || p.obs.canaryBusy:
			p.held = "the change is being tried on one container first"
			p.jobs = nil
			return // the job wakes the exporter when it ends
		case c.unconfirmed && now.Before(c.heldUntil) && p.hasPod(c.uid):
			// The canary's outcome is not known: only its pod is tried,
			// when its backoff allows.
			p.held = "the change is being tried on one container first"
			var keep []*job
			for _, j := range p.jobs {
				if string(j.pod.UID) == c.uid {
					j.tasks, j.canary = j.tasks[:1], true
					keep = append(keep, j)
				}
			}
			p.jobs = keep
			p.retryIn = minPositive(p.retryIn, max(c.heldUntil.Sub(now), time.Second))
			return
		}
		p.dropCanary = c
	}
	sort.Slice(p.jobs, func(i, j int) bool { return p.jobs[i].pod.Name < p.jobs[j].pod.Name })
	first := p.jobs[0]
	first.tasks = first.tasks[:1]
	first.canary = true
	p.jobs = p.jobs[:1]
	p.held = "the change is being tried on one container first"
	p.attachTrying = true
}

// canaryJob is an exporter's job that tries a change first.
type canaryJob struct {
	uid, pod string
	// unconfirmed is set when the job ended without the pod cache showing
	// its outcome: its record could not be written, or the cache lagged.
	// Until heldUntil, no other pod is given the change: the canary's pod
	// alone is tried again, once its backoff allows.
	unconfirmed bool
	heldUntil   time.Time
}

func (r *Reconciler) setCanary(exporter string, c canaryJob) {
	r.memory.with(exporter, func(m *exporterMemory) { m.canary = &c })
}

// clearCanary forgets exporter's canary when it is the job of pod uid.
func (r *Reconciler) clearCanary(exporter, uid string) {
	r.memory.with(exporter, func(m *exporterMemory) {
		if m.canary != nil && m.canary.uid == uid {
			m.canary = nil
		}
	})
}

// attachTrying says whether exporter's attach canary still tries the
// change: its job queued or running, a pod's failed attempt retried, an
// outcome the cache has not shown yet, or a load not yet run for the
// breaker window.
//
// It reads the canary and the clock the look gathered (p.obs).
func attachTrying(p *plan) bool {
	if p.canaryRunning || len(p.trying) > 0 || !p.landedAt.IsZero() {
		return true
	}
	c := p.obs.canary
	return c != nil && (p.obs.canaryBusy || c.unconfirmed && p.obs.now.Before(c.heldUntil) && p.hasPod(c.uid) && !p.refusesAttach(c.uid))
}

// refusesAttach says whether the plan found that the JVM of pod uid refuses a
// live attach (attachRefused): an outcome of its try that the look sees, so
// that the hold kept until the cache showed the try's outcome (canaryEnded)
// ends with it, and the claim at start with it (claimForAttach).
func (p *plan) refusesAttach(uid string) bool {
	for _, pod := range p.refusedPods {
		if string(pod.UID) == uid {
			return true
		}
	}
	return false
}

// canaryEnded records how j, a canary, ended: confirmed when the pod cache
// shows every record it wrote (or it had nothing left to do), so that the
// next plan sees its outcome.
func (r *Reconciler) canaryEnded(j *job, confirmed bool) {
	r.memory.with(j.exporter, func(m *exporterMemory) {
		c := m.canary
		if c == nil || c.uid != string(j.pod.UID) {
			return
		}
		if confirmed {
			c.unconfirmed, c.heldUntil = false, time.Time{}
		} else {
			// Long enough for the pod's first backoffs and the cache to
			// catch up; a pod that cannot be tried again within it gives
			// way.
			c.unconfirmed, c.heldUntil = true, time.Now().Add(max(r.opts.BreakerWindow, canaryHold))
		}
	})
}

// canaryHold is the shortest time a canary whose outcome is unknown holds
// its exporter's change back from the other pods.
const canaryHold = time.Minute
