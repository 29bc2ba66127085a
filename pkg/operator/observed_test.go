package operator

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestGatePlansWithTheClockItIsGiven plans an exporter's change at a clock
// in 2100, with a fixed set of busy pods and no API server: the breaker
// window and a canary's hold are counted from the plan's clock, never from
// the machine's (which would put every wait decades away, or the hold never
// ending).
func TestGatePlansWithTheClockItIsGiven(t *testing.T) {
	r := &Reconciler{opts: Options{}.withDefaults()}
	r.opts.BreakerWindow = time.Minute
	now := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	idle := func(string) bool { return false }
	pods := []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: types.UID("uid-a")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: types.UID("uid-b")}},
	}
	jobs := func() []*job {
		return []*job{{pod: pods[0], tasks: []task{{}, {}}}, {pod: pods[1], tasks: []task{{}, {}}}}
	}

	// A load landed 10 s ago: nothing more runs until the window (1 min)
	// has passed, and the exporter is looked at again then.
	p := &plan{obs: observed{now: now, busy: idle}, matched: pods, jobs: jobs(), landedAt: now.Add(-10 * time.Second)}
	r.gate(p)
	if len(p.jobs) != 0 || p.retryIn != 51*time.Second || !p.attachTrying {
		t.Errorf("a load 10 s old: %d jobs, retry in %s, trying %v; want none, 51s, true", len(p.jobs), p.retryIn, p.attachTrying)
	}

	// A canary whose outcome is unknown holds the change for a minute:
	// only its pod is tried, and the look comes back when the hold ends.
	c := &canaryJob{uid: "uid-b", pod: "b", unconfirmed: true, heldUntil: now.Add(time.Minute)}
	p = &plan{obs: observed{now: now, busy: idle, canary: c}, matched: pods, jobs: jobs()}
	r.gate(p)
	if len(p.jobs) != 1 || p.jobs[0].pod.Name != "b" || len(p.jobs[0].tasks) != 1 || p.retryIn != time.Minute || p.dropCanary != nil {
		t.Errorf("a canary held for a minute: %d jobs, retry in %s, drop %v; want b's first task alone, 1m0s, nil", len(p.jobs), p.retryIn, p.dropCanary)
	}

	// Two minutes later the hold has ended: the canary gives way (plan
	// forgets it) and the first pod by name tries the change.
	p = &plan{obs: observed{now: now.Add(2 * time.Minute), busy: idle, canary: c}, matched: pods, jobs: jobs()}
	r.gate(p)
	if len(p.jobs) != 1 || p.jobs[0].pod.Name != "a" || !p.jobs[0].canary || p.dropCanary != c {
		t.Errorf("a hold that ended: %d jobs, drop %v; want a's job as the canary, and the old canary dropped", len(p.jobs), p.dropCanary)
	}

	// The canary's pod refuses a live attach, which the look sees: its try
	// ended, though the cache had not shown its outcome when its job ended,
	// so that a pod created now may try the change at its start (the attach
	// claim goes with it).
	p = &plan{obs: observed{now: now, busy: idle, canary: c}, matched: pods, refusedPods: pods[1:]}
	if attachTrying(p) {
		t.Errorf("a canary whose pod refuses attach: still trying; want its try ended")
	}
	p = &plan{obs: observed{now: now, busy: idle, canary: c}, matched: pods}
	if !attachTrying(p) {
		t.Errorf("a canary whose outcome is not seen yet: not trying; want its hold kept")
	}

	// A canary whose job is queued or running holds every job back.
	p = &plan{obs: observed{now: now, busy: idle, canary: &canaryJob{uid: "uid-b"}, canaryBusy: true}, matched: pods, jobs: jobs()}
	r.gate(p)
	if len(p.jobs) != 0 || !p.attachTrying {
		t.Errorf("a canary running: %d jobs, trying %v; want none, true", len(p.jobs), p.attachTrying)
	}
}
