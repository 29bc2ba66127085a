package operator

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
)

// evictionVisibleWithin is how long after the operator recorded an eviction
// its pod may still look untouched in the pod cache (the cache lags the
// eviction); past it the eviction did not take place (it was refused, or the
// operator ended between recording it and asking for it) and is forgotten.
const evictionVisibleWithin = 30 * time.Second

// evictions is restartOnRefusal's in-memory memory of one exporter: only
// what it reports. The state that decides whether a pod may be evicted (the
// eviction under way, the stop) is in the exporter's
// status.restartOnRefusal, where a restarted operator or a new leader finds
// it.
type evictions struct {
	// skipped are the pods without a controller already reported by an
	// Event; refusals are the last refusal of each pod's eviction. mu
	// guards both: the exporter's look changes them, and the pod watch
	// drops the pods that are gone (pruneIfGone).
	mu       sync.Mutex
	skipped  map[types.UID]bool
	refusals map[types.UID]string
}

// skip records that the pod with uid, which has no controller, is reported,
// and says whether it was not already.
func (e *evictions) skip(uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.skipped[uid] {
		return false
	}
	e.skipped[uid] = true
	return true
}

// refusal is the last refusal of the eviction of the pod with uid ("" when
// none).
func (e *evictions) refusal(uid types.UID) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.refusals[uid]
}

// refused records why the eviction of the pod with uid was refused; ""
// forgets it.
func (e *evictions) refused(uid types.UID, why string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if why == "" {
		delete(e.refusals, uid)
		return
	}
	e.refusals[uid] = why
}

// holds says whether the memory has the pod with uid.
func (e *evictions) holds(uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.skipped[uid] || e.refusals[uid] != ""
}

// forget drops the pod with uid.
func (e *evictions) forget(uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.skipped, uid)
	delete(e.refusals, uid)
}

// keepOnly drops the pods that are not in seen. A look that read a pod
// before its deletion can note it after the pod watch forgot it
// (pruneIfGone), and no later event of the pod comes: the exporter's next
// look, which no longer sees it, drops it here.
func (e *evictions) keepOnly(seen map[types.UID]bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for uid := range e.skipped {
		if !seen[uid] {
			delete(e.skipped, uid)
		}
	}
	for uid := range e.refusals {
		if !seen[uid] {
			delete(e.refusals, uid)
		}
	}
}

// size is the number of entries.
func (e *evictions) size() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.skipped) + len(e.refusals)
}

// evictionsOf returns exporter's memory, created when missing.
func (r *Reconciler) evictionsOf(exporter string) *evictions {
	var e *evictions
	r.memory.with(exporter, func(m *exporterMemory) {
		if m.evictions == nil {
			m.evictions = &evictions{skipped: map[types.UID]bool{}, refusals: map[types.UID]string{}}
		}
		e = m.evictions
	})
	return e
}

// forgetEvictions drops exporter's memory (deleted, or restartOnRefusal off).
func (r *Reconciler) forgetEvictions(exporter string) {
	r.memory.with(exporter, func(m *exporterMemory) { m.evictions = nil })
}

// holdsPod says whether restartOnRefusal's memory of any exporter holds
// the pod with uid. (replaceHarmed's memory, one pod per open breaker, goes
// after an hour: its lock is held around an eviction, which the pod watch
// must not wait for.)
func (r *Reconciler) holdsPod(uid types.UID) bool {
	held := false
	r.memory.each(func(m *exporterMemory) { held = held || m.evictions != nil && m.evictions.holds(uid) })
	return held
}

// forgetPodEvictions drops the pod with uid, which is gone, from
// restartOnRefusal's memory of every exporter.
func (r *Reconciler) forgetPodEvictions(uid types.UID) {
	r.memory.each(func(m *exporterMemory) {
		if m.evictions != nil {
			m.evictions.forget(uid)
		}
	})
}

// seen are the UIDs of the pods the plan read that its selector matches,
// being deleted or not.
func (p *plan) seen() map[types.UID]bool {
	out := make(map[types.UID]bool, len(p.matched)+len(p.terminating))
	for _, list := range [][]*corev1.Pod{p.matched, p.terminating} {
		for _, pod := range list {
			out[pod.UID] = true
		}
	}
	return out
}

// onlyAttachRefused says whether every failure of the plan is AttachRefused.
func (p *plan) onlyAttachRefused() bool {
	return len(p.attachRefused) > 0 && len(p.attachRefused) == len(p.failures)
}

// attachRefusedMessage is the Ready message when every failure is a JVM that
// refuses a live attach under mode Both.
func attachRefusedMessage(p *plan) string {
	sort.Strings(p.attachRefused)
	msg := fmt.Sprintf("the JVMs of %s refuse a live attach (-XX:+DisableAttachMechanism or -XX:-EnableDynamicAgentLoading): "+
		"their pods get the agent at start when they are next created, for example by a rollout (kubectl rollout restart)", limitList(p.attachRefused, 10))
	if p.restartNote != "" {
		msg += "; restartOnRefusal: " + p.restartNote
	} else if !p.spec.Injection.RestartOnRefusal {
		msg += "; spec.injection.restartOnRefusal: true would have the operator evict them, one at a time"
	}
	return msg
}

// restartRefused is spec.injection.restartOnRefusal: it evicts, through the
// eviction API (so that PodDisruptionBudgets apply), the pods whose JVM
// refuses a live attach (AttachRefused), so that their controllers recreate
// them and the webhook gives the new pods the agent at start.
//
// One pod of the exporter at a time, and only while every pod the exporter
// matches runs and is ready and none is being deleted: at most one pod is
// unavailable because of the operator. The next eviction waits until the
// evicted pod is gone and its replacement (a pod of the same controller
// created at or after the eviction) runs, is ready and has the agent at
// start. When the replacement comes without the agent, does not appear
// within Options.ReplacementWait after the pod is gone, or is not ready
// within it after its creation, the operator stops: no more pods of the
// exporter are evicted until its spec changes (a Warning Event, Degraded and
// status.restartOnRefusal.stopped say which pod, controller and why). The
// eviction under way and the stop are kept in status.restartOnRefusal,
// written before the eviction is asked for, so that a restarted operator or a
// new leader goes on where this one stopped. A pod without a controller is
// never evicted (it would only be deleted). A refused eviction (429) is
// retried with backoff. What it does is said in p.restartNote (the Ready
// message), in Events and in the log.
func (r *Reconciler) restartRefused(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, p *plan) {
	key := ex.Namespace + "/" + ex.Name
	if !p.spec.Injection.RestartOnRefusal || p.spec.Injection.Mode != jmxv1alpha1.InjectionModeBoth {
		r.restartOff(ctx, ex, p)
		return
	}
	state := ex.Status.RestartOnRefusal.DeepCopy()
	if state == nil {
		state = &jmxv1alpha1.RestartOnRefusalStatus{}
	}
	if state.Stopped != nil && state.Stopped.Generation != ex.Generation {
		state.Stopped = nil // a new spec resumes evictions
	}
	if state.Stopped != nil {
		p.restartStopped = state.Stopped.Message
	}
	if p.webhookErr != "" {
		if len(p.refusedPods) > 0 {
			p.restartNote = "evicts nothing: this operator runs without its admission webhook, so a recreated pod would come back without the agent"
		}
		return
	}
	if !p.podsRead {
		return // an eviction under way is judged when the pods can be read
	}
	l := &restartLook{r: r, ctx: ctx, ex: ex, p: p, key: key, state: state, mem: r.evictionsOf(key)}
	l.mem.keepOnly(p.seen())
	candidates := l.candidates()
	defer func() { p.restartNote = strings.Join(l.notes, "; ") }()
	if ev := state.Eviction; ev != nil && !l.follow(ev) {
		return
	}
	if state.Stopped != nil {
		if !l.save() { // a stop of an earlier generation is dropped
			return
		}
		l.notes = append(l.notes, state.Stopped.Message)
		return
	}
	if !l.save() || len(candidates) == 0 || !l.mayEvict() {
		return
	}
	if pod := l.next(candidates); pod != nil {
		l.evict(pod)
	}
}

// restartOff is restartRefused when restartOnRefusal is off (or the mode
// is not Both): nothing is under way any more, and a stop ends with it.
func (r *Reconciler) restartOff(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, p *plan) {
	r.forgetEvictions(ex.Namespace + "/" + ex.Name)
	if ex.Status.RestartOnRefusal != nil {
		if err := r.saveRestart(ctx, ex, nil); err != nil {
			p.retryIn = minPositive(p.retryIn, time.Second)
		}
	}
}

// restartLook is one look of restartRefused at an exporter: the state it
// keeps in status.restartOnRefusal, its memory, and what it says (notes,
// the Ready message's part).
type restartLook struct {
	r     *Reconciler
	ctx   context.Context
	ex    *jmxv1alpha1.PrometheusJmxExporter
	p     *plan
	key   string
	state *jmxv1alpha1.RestartOnRefusalStatus
	mem   *evictions
	notes []string
}

// podRef is pod as an Event's object.
func podRef(pod *corev1.Pod) *corev1.Pod {
	ref := pod.DeepCopy()
	ref.APIVersion, ref.Kind = "v1", "Pod"
	return ref
}

// requeue has the exporter looked at again within d.
func (l *restartLook) requeue(d time.Duration) { l.p.retryIn = minPositive(l.p.retryIn, d) }

// candidates are the refused pods with a controller, sorted by name; the
// pods without one are reported (an Event once per pod, and a note).
func (l *restartLook) candidates() []*corev1.Pod {
	var candidates []*corev1.Pod
	var bare []string
	p := l.p
	sort.Slice(p.refusedPods, func(i, j int) bool { return p.refusedPods[i].Name < p.refusedPods[j].Name })
	for _, pod := range p.refusedPods {
		if metav1.GetControllerOf(pod) != nil {
			candidates = append(candidates, pod)
			continue
		}
		bare = append(bare, pod.Name)
		if l.mem.skip(pod.UID) {
			msg := fmt.Sprintf("pod %s refuses a live attach and has no controller: evicting it would only delete it, so restartOnRefusal leaves it; "+
				"recreate it yourself, and the new pod gets the agent at start", pod.Name)
			sdk.LoggerFrom(l.ctx).Warnf("operator: %s: %s", l.key, msg)
			rec := sdk.EventRecorderFrom(l.ctx)
			rec.Event(podRef(pod), corev1.EventTypeWarning, jmxv1alpha1.ReasonEvictionSkipped, msg)
			rec.Event(l.ex, corev1.EventTypeWarning, jmxv1alpha1.ReasonEvictionSkipped, msg)
		}
	}
	if len(bare) > 0 {
		l.notes = append(l.notes, fmt.Sprintf("pods %s have no controller and are not evicted (an eviction would only delete them): recreate them yourself", limitList(bare, 5)))
	}
	return candidates
}

// save writes the state; when it cannot, nothing more happens in this look
// (the next one starts again from the stored state).
func (l *restartLook) save() bool {
	if equality.Semantic.DeepEqual(l.ex.Status.RestartOnRefusal, normalRestart(l.state)) {
		return true
	}
	if err := l.r.saveRestart(l.ctx, l.ex, l.state); err != nil {
		if apierrors.IsConflict(err) {
			l.requeue(time.Second) // a newer exporter: the next look has it
			return false
		}
		sdk.LoggerFrom(l.ctx).Warnf("operator: %s: restartOnRefusal: write status.restartOnRefusal: %v (tried again)", l.key, err)
		l.notes = append(l.notes, fmt.Sprintf("waiting: its state could not be written to the exporter's status (%s); tried again", truncateMsg(err.Error(), 300)))
		l.requeue(30 * time.Second)
		return false
	}
	return true
}

// stop ends the evictions until the exporter's spec changes: ev's pod was
// not replaced as it should be (why).
func (l *restartLook) stop(ev *jmxv1alpha1.Eviction, reason, replacement, why string) {
	gen := l.ex.Generation
	msg := fmt.Sprintf("restartOnRefusal stopped: the operator evicted pod %s of %s %s, and %s; no more pods are evicted until the exporter's spec changes "+
		"(metadata.generation %d; any change of spec resumes it), so that the workload is never emptied",
		ev.Pod, ev.Controller.Kind, ev.Controller.Name, why, gen)
	l.state.Eviction = nil
	l.state.Stopped = &jmxv1alpha1.RestartOnRefusalStop{Generation: gen, Reason: reason, Message: truncateMsg(msg, 4000),
		Pod: ev.Pod, Replacement: replacement, StoppedAt: metav1.NewTime(time.Now().Truncate(time.Second))}
	if !l.save() {
		return
	}
	l.p.restartStopped = l.state.Stopped.Message
	l.notes = append(l.notes, l.state.Stopped.Message)
	sdk.LoggerFrom(l.ctx).Warnf("operator: %s: %s (%s)", l.key, msg, reason)
	sdk.EventRecorderFrom(l.ctx).Event(l.ex, corev1.EventTypeWarning, jmxv1alpha1.ReasonRestartOnRefusalStopped, msg)
}

// follow judges the eviction under way, ev: it says whether the look goes
// on (ev is over: replaced by a ready pod with the agent, or never done).
func (l *restartLook) follow(ev *jmxv1alpha1.Eviction) bool {
	repl := replacementOf(l.p, ev)
	deleting, untouched := presence(l.p, types.UID(ev.UID))
	evictedAt := ev.EvictedAt.UTC().Format(time.RFC3339)
	switch {
	case repl != nil && !hasAgentAtStart(repl):
		l.stop(ev, jmxv1alpha1.RestartStopReplacementNotInjected, repl.Name, fmt.Sprintf("its replacement %s was created without the agent at start "+
			"(is the operator's admission webhook running and reachable? the warnings of the pod's creation may say why)", repl.Name))
		return false
	case untouched && time.Since(ev.EvictedAt.Time) < evictionVisibleWithin:
		l.notes = append(l.notes, fmt.Sprintf("evicted pod %s at %s; waiting until it is gone", ev.Pod, evictedAt))
		l.requeue(5 * time.Second)
		return false
	case untouched:
		// Recorded, but the pod was never evicted: forget it, and judge
		// the pod again like any other.
		sdk.LoggerFrom(l.ctx).Infof("operator: %s: restartOnRefusal: pod %s was recorded as evicted at %s but is not being deleted: the eviction did not take place",
			l.key, ev.Pod, evictedAt)
		l.state.Eviction = nil
		return l.save()
	case deleting:
		l.notes = append(l.notes, fmt.Sprintf("evicted pod %s at %s; waiting until it is gone", ev.Pod, evictedAt))
		l.requeue(10 * time.Second)
		return false
	case repl == nil:
		l.awaitReplacement(ev)
		return false
	case !podReady(repl):
		l.awaitReady(ev, repl)
		return false
	}
	// Replaced by a ready pod with the agent: the next may go.
	l.state.Eviction = nil
	return l.save()
}

// awaitReplacement waits, at most Options.ReplacementWait after ev's pod is
// gone, for its replacement to appear, and stops when none did.
func (l *restartLook) awaitReplacement(ev *jmxv1alpha1.Eviction) {
	if ev.GoneAt == nil {
		ev.GoneAt = ptrTo(metav1.NewTime(time.Now().Truncate(time.Second)))
		if !l.save() {
			return
		}
	}
	wait := l.r.opts.ReplacementWait
	if left := wait - time.Since(ev.GoneAt.Time); left > 0 {
		l.notes = append(l.notes, fmt.Sprintf("evicted pod %s; waiting for its %s %s to replace it (at most %s more)",
			ev.Pod, ev.Controller.Kind, ev.Controller.Name, left.Round(time.Second)))
		l.requeue(min(10*time.Second, left+time.Second))
		return
	}
	l.stop(ev, jmxv1alpha1.RestartStopReplacementMissing, "", fmt.Sprintf("no replacement appeared within %s after it was gone "+
		"(can its controller create pods with the agent? an admission policy, a quota or a LimitRange may refuse them: see the controller's Events; "+
		"or it was scaled down)", wait))
}

// awaitReady waits, at most Options.ReplacementWait after its creation, for
// ev's replacement repl to run and be ready, and stops when it did not.
func (l *restartLook) awaitReady(ev *jmxv1alpha1.Eviction, repl *corev1.Pod) {
	wait := l.r.opts.ReplacementWait
	if left := wait - time.Since(repl.CreationTimestamp.Time); left > 0 {
		l.notes = append(l.notes, fmt.Sprintf("evicted pod %s; waiting until its replacement %s runs and is ready (at most %s more)",
			ev.Pod, repl.Name, left.Round(time.Second)))
		l.requeue(min(10*time.Second, left+time.Second))
		return
	}
	l.stop(ev, jmxv1alpha1.RestartStopReplacementNotReady, repl.Name, fmt.Sprintf("its replacement %s did not run and become ready within %s after its creation "+
		"(see the pod's Events and its JVM's log)", repl.Name, wait))
}

// mayEvict says whether a pod may be evicted now: the exporter may act, no
// change is being tried on one pod first, and every pod it matches runs and
// is ready and none is being deleted (one pod at a time). When not, a note
// says why.
func (l *restartLook) mayEvict() bool {
	p := l.p
	switch {
	case !p.mayAct():
		// The webhook would not give a recreated pod the agent either.
		l.notes = append(l.notes, "waiting: the exporter cannot give pods the agent at start now (see its ConfigValid and Degraded conditions)")
		return false
	case p.attachClaim != nil:
		// A replacement created now would be created without the agent:
		// the change is being tried on one pod first (by live attach
		// until the leader drops its claim, or at its start).
		l.notes = append(l.notes, fmt.Sprintf("waiting: the exporter's change is being tried on pod %s, by live attach, first", p.attachClaim.AttachedPod))
		l.requeue(10 * time.Second)
		return false
	case p.atStartClaimed:
		l.notes = append(l.notes, "waiting: the exporter's change is being tried on one pod, given the agent at its start, first")
		l.requeue(10 * time.Second)
		return false
	case len(p.terminating) > 0:
		l.notes = append(l.notes, fmt.Sprintf("waiting: pod %s is being deleted (one pod at a time)", p.terminating[0].Name))
		l.requeue(10 * time.Second)
		return false
	}
	for _, pod := range p.matched {
		if !podReady(pod) {
			l.notes = append(l.notes, fmt.Sprintf("waiting: pod %s is not running and ready (one pod at a time)", pod.Name))
			l.requeue(30 * time.Second)
			return false
		}
	}
	return true
}

// next is the first candidate whose eviction is not waiting for its
// backoff (a refused one waits; the next in line may go meanwhile, nothing
// of the refused one being under way), or nil.
func (l *restartLook) next(candidates []*corev1.Pod) *corev1.Pod {
	var pod *corev1.Pod
	for _, c := range candidates {
		if wait := l.r.retries.wait(evictKey(c)); wait > 0 {
			l.requeue(wait)
			if why := l.mem.refusal(c.UID); why != "" {
				l.notes = append(l.notes, fmt.Sprintf("the eviction of pod %s was refused (%s); retried with backoff", c.Name, why))
			}
			continue
		}
		if pod == nil {
			pod = c
		}
	}
	return pod
}

// evict records the eviction of pod in the state, then asks for it, and
// says how it went.
func (l *restartLook) evict(pod *corev1.Pod) {
	owner := *metav1.GetControllerOf(pod)
	// Recorded before it is asked for: whoever looks next, this operator
	// or another, knows that it may be under way.
	l.state.Eviction = &jmxv1alpha1.Eviction{Pod: pod.Name, UID: string(pod.UID),
		Controller: jmxv1alpha1.ControllerRef{Kind: owner.Kind, Name: owner.Name, UID: string(owner.UID)},
		EvictedAt:  metav1.NewTime(time.Now().Truncate(time.Second))}
	l.state.Eviction.Siblings = siblingsOf(l.p, l.state.Eviction)
	if len(l.state.Eviction.Siblings) > jmxv1alpha1.MaxEvictionSiblings {
		// Its replacement could not be told from them: wait until they
		// are older than a second.
		l.state.Eviction = nil
		l.notes = append(l.notes, fmt.Sprintf("waiting: %s %s has just created many pods", owner.Kind, owner.Name))
		l.requeue(2 * time.Second)
		return
	}
	if !l.save() {
		return
	}
	err := evictOnce(l.ctx, l.r.opts.Client, pod)
	if err != nil {
		// Not under way: forget it (if this write fails, the record is
		// dropped once the pod is seen untouched past
		// evictionVisibleWithin).
		l.state.Eviction = nil
		l.save()
	}
	switch {
	case err == nil:
		l.evicted(pod, owner)
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Gone or replaced meanwhile: the next look sees what is there.
		l.requeue(time.Second)
	default:
		l.evictionRefused(pod, err)
	}
}

// evicted says that pod, of owner, was evicted.
func (l *restartLook) evicted(pod *corev1.Pod, owner metav1.OwnerReference) {
	l.r.retries.forget(evictKey(pod))
	l.mem.refused(pod.UID, "")
	msg := fmt.Sprintf("evicted pod %s, whose JVM refuses a live attach (spec.injection.restartOnRefusal): its %s %s recreates it, and the new pod "+
		"gets the agent at start; the exporter's next refused pod waits until this one is gone and its replacement runs", pod.Name, owner.Kind, owner.Name)
	sdk.LoggerFrom(l.ctx).Infof("operator: %s: %s", l.key, msg)
	rec := sdk.EventRecorderFrom(l.ctx)
	rec.Event(podRef(pod), corev1.EventTypeNormal, jmxv1alpha1.ReasonEvictedOnRefusal, msg)
	rec.Event(l.ex, corev1.EventTypeNormal, jmxv1alpha1.ReasonEvictedOnRefusal, msg)
	l.notes = append(l.notes, fmt.Sprintf("evicted pod %s; waiting until it is gone and replaced", pod.Name))
	l.requeue(5 * time.Second)
}

// evictionRefused says that the eviction of pod was refused (err), and
// backs it off.
func (l *restartLook) evictionRefused(pod *corev1.Pod, err error) {
	backoff := l.r.retries.failed(evictKey(pod))
	why := truncateMsg(err.Error(), 500)
	switch {
	case apierrors.IsTooManyRequests(err):
		why = "429, a PodDisruptionBudget allows no disruption now: " + why
	case apierrors.IsForbidden(err):
		why = "forbidden: the operator needs create on pods/eviction (or turn restartOnRefusal off): " + why
	}
	l.mem.refused(pod.UID, why)
	msg := fmt.Sprintf("the eviction of pod %s (restartOnRefusal) was refused: %s; retried with backoff", pod.Name, why)
	sdk.LoggerFrom(l.ctx).Warnf("operator: %s: %s (next in %s)", l.key, msg, backoff.Round(time.Second))
	rec := sdk.EventRecorderFrom(l.ctx)
	rec.Event(podRef(pod), corev1.EventTypeWarning, jmxv1alpha1.ReasonEvictionRefused, msg)
	rec.Event(l.ex, corev1.EventTypeWarning, jmxv1alpha1.ReasonEvictionRefused, msg)
	l.notes = append(l.notes, fmt.Sprintf("the eviction of pod %s was refused (%s); retried with backoff", pod.Name, why))
	l.requeue(backoff)
}

// normalRestart is state as the status keeps it: nil when empty.
func normalRestart(state *jmxv1alpha1.RestartOnRefusalStatus) *jmxv1alpha1.RestartOnRefusalStatus {
	if state == nil || state.Eviction == nil && state.Stopped == nil {
		return nil
	}
	return state
}

// saveRestart writes state as the exporter's status.restartOnRefusal, at
// once and guarded by ex's resourceVersion (a stale view is a Conflict, and
// nothing is evicted on it), and takes the stored exporter into ex, so that
// the status written after the look keeps it.
func (r *Reconciler) saveRestart(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, state *jmxv1alpha1.RestartOnRefusalStatus) error {
	cp := ex.DeepCopy()
	cp.Status.RestartOnRefusal = normalRestart(state.DeepCopy())
	if err := action.UpdateStatus(ctx, cp); err != nil {
		return err
	}
	if got := cp.Status.RestartOnRefusal; state != nil && (state.Eviction != nil && (got == nil || got.Eviction == nil) ||
		state.Stopped != nil && (got == nil || got.Stopped == nil)) {
		// A CRD older than this operator prunes the field: the state would
		// be lost, so nothing is evicted on it.
		return fmt.Errorf("the API server dropped status.restartOnRefusal: the PrometheusJmxExporter CRD is older than this operator; apply this release's CRD")
	}
	ex.ResourceVersion = cp.ResourceVersion
	ex.Status.RestartOnRefusal = cp.Status.RestartOnRefusal
	return nil
}

// evictRetry is the rest of an evictKey after the pod's UID; the pod's
// container starts (retries.keepOnly) leave it alone.
const evictRetry = "evict"

// evictKey is the retries' key of a pod's eviction: under the pod's UID, so
// that it goes with the pod (pruneIfGone).
func evictKey(pod *corev1.Pod) string { return string(pod.UID) + "/" + evictRetry }

// presence says whether the plan saw the pod with uid being deleted, or
// there and not being deleted.
func presence(p *plan, uid types.UID) (deleting, untouched bool) {
	for _, pod := range p.terminating {
		if pod.UID == uid {
			return true, false
		}
	}
	for _, pod := range p.matched {
		if pod.UID == uid {
			return pod.DeletionTimestamp != nil, pod.DeletionTimestamp == nil
		}
	}
	return false, false
}

// laterOf says whether pod is one of e's controller's, not the evicted
// pod, and created at or after the eviction (creation times have a
// resolution of a second, and EvictedAt is truncated to one).
func laterOf(pod *corev1.Pod, e *jmxv1alpha1.Eviction) bool {
	c := metav1.GetControllerOf(pod)
	return c != nil && string(c.UID) == e.Controller.UID && string(pod.UID) != e.UID && !pod.CreationTimestamp.Before(&e.EvictedAt)
}

// siblingsOf are the UIDs of the pods of e's controller, other than the
// evicted one, that the plan saw and laterOf would take for a replacement.
func siblingsOf(p *plan, e *jmxv1alpha1.Eviction) []string {
	var out []string
	for _, list := range [][]*corev1.Pod{p.matched, p.terminating} {
		for _, pod := range list {
			if laterOf(pod, e) {
				out = append(out, string(pod.UID))
			}
		}
	}
	sort.Strings(out)
	return out
}

// replacementOf is the evicted pod's replacement: a pod of its controller,
// not the evicted pod, created at or after the eviction and not one of its
// siblings (the newest, when several), or nil.
func replacementOf(p *plan, e *jmxv1alpha1.Eviction) *corev1.Pod {
	var out *corev1.Pod
	for _, pod := range p.matched {
		if !laterOf(pod, e) || slices.Contains(e.Siblings, string(pod.UID)) {
			continue
		}
		if out == nil || out.CreationTimestamp.Before(&pod.CreationTimestamp) {
			out = pod
		}
	}
	return out
}

// hasAgentAtStart says whether the webhook gave pod the agent at start.
func hasAgentAtStart(pod *corev1.Pod) bool {
	_, ok, _ := atstart.ParseRecord(pod)
	return ok
}

// podReady says whether the pod runs and all its containers are ready.
func podReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if !cs.Ready {
			return false
		}
	}
	return true
}

// evictOnce asks the eviction API to evict pod (its UID as a precondition),
// once: the client's own retries are off. A PodDisruptionBudget's refusal
// (429, with a Retry-After) would otherwise be retried up to ten times
// inside the call, holding the exporter's handler for about 100 s; the
// callers retry with their own backoff, between looks.
func evictOnce(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) error {
	uid := pod.UID
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	}
	rc, ok := client.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil {
		// A client without a REST client of its own (a fake, in unit tests).
		return client.CoreV1().Pods(pod.Namespace).EvictV1(ctx, ev)
	}
	return rc.Post().Namespace(pod.Namespace).Resource("pods").Name(pod.Name).SubResource("eviction").
		MaxRetries(0).Body(ev).Do(ctx).Error()
}
