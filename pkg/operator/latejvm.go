package operator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
)

// Late JVMs: a container start in which jmx-attach found no JVM within
// --jvm-wait is not given up. It is looked at again on a slow schedule
// (Options.LateJVMInterval, doubling up to maxLateJVMInterval), and its next
// start (a restart) is looked at like any new one. Its record says when the
// next look is (ContainerRecord.NextLookAt), or why there is none
// (LooksEnded).

// DefaultLateJVMInterval is the wait before the second look at a container
// start without a JVM; each later look waits twice as long as the one
// before, up to maxLateJVMInterval.
const DefaultLateJVMInterval = 10 * time.Minute

// maxLateJVMInterval is the longest wait between two looks (or the
// interval itself, when that is longer).
const maxLateJVMInterval = time.Hour

// maxLateLooks bounds the late looks at one container start: with the
// default interval the last is about 4h10m after the first look. A JVM
// launched later than that is found when its container restarts. Each look
// with Exec streams jmx-attach and the agent jar into the container, so
// sidecars that never run a JVM must not be looked at forever.
const maxLateLooks = 6

// lateLookBudgetKept is how many of a pod's ephemeral containers a late look
// leaves unused: one, for the injection of its containers' next start.
const lateLookBudgetKept = 1

// lookDelay is the wait after look n (1: the first) found no JVM.
func (r *Reconciler) lookDelay(n int) time.Duration {
	d := r.opts.LateJVMInterval
	limit := max(maxLateJVMInterval, d)
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// lateLooksOn says whether containers without a JVM are looked at again.
func (r *Reconciler) lateLooksOn() bool { return r.opts.LateJVMInterval > 0 }

// nextLook says when the container start of c (a record with no JVM) is next
// looked at, and whether it is at all. A record of an earlier release,
// without looks, counts as one look that ended --jvm-wait after the
// container started.
func (r *Reconciler) nextLook(c ContainerRecord, cs corev1.ContainerStatus) (time.Time, bool) {
	if !c.NoJVM || c.LooksEnded != "" || !r.lateLooksOn() {
		return time.Time{}, false
	}
	if c.NextLookAt != nil {
		return c.NextLookAt.Time, true
	}
	var started time.Time
	if cs.State.Running != nil {
		started = cs.State.Running.StartedAt.Time
	}
	return started.Add(r.opts.JVMWait + r.lookDelay(max(c.Looks, 1))), true
}

// noJVMRecord is the record of a look at cs that found no JVM: the n-th,
// with the next look scheduled, or none (ended says why).
func (r *Reconciler) noJVMRecord(j *job, cs corev1.ContainerStatus, n int, ended string) ContainerRecord {
	c := ContainerRecord{ContainerID: cs.ContainerID, Port: j.spec.Port, ConfigHash: j.configHash, Generation: j.generation,
		NoJVM: true, Looks: n}
	switch {
	case ended != "":
		c.LooksEnded = truncateMsg(ended, 512)
	case n > maxLateLooks:
		c.LooksEnded = fmt.Sprintf("no more looks for a JVM that starts late: %d looks found none (at most %d late looks per container start); "+
			"the container's next start is looked at as usual", n, maxLateLooks)
	case r.lateLooksOn():
		// Records keep whole seconds: rounded up, the look is never early.
		at := time.Now().Add(r.lookDelay(n))
		if whole := at.Truncate(time.Second); whole.Before(at) {
			at = whole.Add(time.Second)
		}
		next := metav1.NewTime(at)
		c.NextLookAt = &next
	}
	return c
}

// lateLookDone handles the outcome of a late look (a look after the first
// that found no JVM) unless it found a JVM: no JVM again, or a look that
// could not be made (a transient error, the pod's budget of ephemeral
// containers, too many attempts) keep the container without a JVM, with the
// next look scheduled or the looks ended. It says whether it did; a JVM
// found is recorded like any injection.
func (r *Reconciler) lateLookDone(ctx context.Context, j *job, t task, out inject.Outcome, err error, rec classified, took time.Duration) bool {
	cs := t.container
	n := t.previous.Looks + 1
	if t.previous.Looks == 0 {
		n = 2 // a record of an earlier release: its look was the first
	}
	var c ContainerRecord
	switch {
	case rec.noJVM:
		c = r.noJVMRecord(j, cs, n, "")
	case out.Refused == inject.ReasonBudgetKept || out.Refused == inject.ReasonBudgetExhausted:
		c = r.noJVMRecord(j, cs, t.previous.Looks, "no more looks for a JVM that starts late ("+out.Refused+"): "+out.Detail+
			"; the container's next start is looked at as usual")
	case err != nil && errors.Is(err, inject.ErrTooManyAttempts):
		c = r.noJVMRecord(j, cs, t.previous.Looks, "no more looks for a JVM that starts late: "+err.Error())
	case rec.class == resultRetry:
		// A look that could not be made counts as one: the schedule, not
		// the backoff of injections, paces the looks.
		c = r.noJVMRecord(j, cs, n, "")
		c.LastError = truncateMsg(rec.reason+": "+rec.message, 1024)
	default:
		return false
	}
	r.metrics.observe(j.strategy.Name(), resultSuccess, jmxv1alpha1.ReasonNoJVMFound, took)
	if _, err := updateRecord(ctx, r.opts.Client, j.pod.Namespace, j.pod.Name, j.pod.UID, func(pr *PodRecord) {
		pr.Exporter = j.exporterName
		pr.Containers[cs.Name] = c
	}); err != nil {
		r.retries.failed(retryKey(j.pod, cs.Name, cs.ContainerID))
		r.op.Logger().Warnf("operator: record the look for a JVM in %s/%s/%s: %v", j.pod.Namespace, j.pod.Name, cs.Name, err)
		return true
	}
	j.written[cs.Name] = c
	r.op.Logger().WithField("pod", j.pod.Namespace+"/"+j.pod.Name).WithField("container", cs.Name).
		Debugf("operator: look %d for a JVM that starts late: none (next %v, ended %q)", n, c.NextLookAt, c.LooksEnded)
	return true
}

// noJVMCondition is Ready=False when no selected container of any matched
// pod has a JVM: WaitingForJVM while some are looked at again, NoJVMFound
// when none is.
func (p *plan) noJVMCondition() metav1.Condition {
	if len(p.waitingJVM) > 0 {
		// Names only, sorted: the message (and so the status) does not
		// change with each look; each pod's record has its next look.
		sort.Strings(p.waitingJVM)
		return condition(jmxv1alpha1.ConditionReady, false, jmxv1alpha1.ReasonWaitingForJVM, fmt.Sprintf(
			"waiting for a JVM: none found yet in the selected containers of the matched pods (%d containers); they are looked at again "+
				"on the late-JVM schedule (--late-jvm-interval; the pod's record %s has the next look) and when they restart: %s",
			len(p.waitingJVM), AnnotationAgents, limitList(p.waitingJVM, 10)))
	}
	return condition(jmxv1alpha1.ConditionReady, false, jmxv1alpha1.ReasonNoJVMFound,
		"no JVM runs in the selected containers of the matched pods")
}

// planNoJVM plans, for a container start found without a JVM, the next look
// for a JVM that started late, when it is due.
func (r *Reconciler) planNoJVM(p *plan, j *job, pod *corev1.Pod, cs corev1.ContainerStatus, c ContainerRecord, canInject bool) {
	at, waiting := r.nextLook(c, cs)
	if !waiting {
		return
	}
	p.waitingJVM = append(p.waitingJVM, pod.Name+"/"+cs.Name)
	if !canInject {
		return
	}
	if wait := time.Until(at); wait > 0 {
		p.retryIn = minPositive(p.retryIn, wait+time.Second)
		return
	}
	r.queue(p, j, task{container: cs, previous: c, hadRecord: true, lateLook: true})
}
