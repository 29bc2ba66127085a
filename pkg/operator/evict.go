package operator

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// Event reasons of spec.injection.restartOnRefusal.
const (
	// EventEvicted: the operator evicted a pod whose JVM refuses a live
	// attach, so that its controller recreates it with the agent at start.
	EventEvicted = "EvictedOnRefusal"
	// EventEvictionRefused: the API server refused the eviction (429: a
	// PodDisruptionBudget allows no disruption now; or RBAC); it is retried
	// with backoff.
	EventEvictionRefused = "EvictionRefused"
	// EventEvictionSkipped: the pod has no controller, so an eviction would
	// only delete it; the operator never does.
	EventEvictionSkipped = "EvictionSkipped"
	// EventRestartOnRefusalStopped: a pod the operator evicted came back
	// without the agent at start (the webhook did not inject it); the
	// operator evicts no more of the exporter's pods until its spec changes
	// or the operator restarts, so that pods are not evicted in a loop.
	EventRestartOnRefusalStopped = "RestartOnRefusalStopped"
)

// replacementWait is how long, after an evicted pod is gone, the operator
// waits for a replacement to appear before it takes the pod as not
// replaced (its controller was scaled down or deleted) and moves on.
const replacementWait = 2 * time.Minute

// evictions is restartOnRefusal's memory of one exporter.
type evictions struct {
	// last is the eviction under way: the next waits until its pod is gone
	// and its replacement, if any, runs and is ready.
	last *evicted
	// stopped, when set, says why no more pods are evicted until the
	// exporter's generation changes (generation is the one it was set at).
	stopped    string
	generation int64
	// skipped are the pods without a controller already reported by an
	// Event; refusals are the last refusal of each pod's eviction.
	skipped  map[types.UID]bool
	refusals map[types.UID]string
}

// evicted is one eviction.
type evicted struct {
	pod   string
	uid   types.UID
	owner metav1.OwnerReference
	// siblings are the controller's pods when the pod was evicted: a pod of
	// the controller that is not among them is the replacement.
	siblings map[types.UID]bool
	at       time.Time
	// goneAt is when the operator first saw the pod gone.
	goneAt time.Time
}

// evictionsOf returns exporter's memory, created when missing.
func (r *Reconciler) evictionsOf(exporter string) *evictions {
	r.evictMu.Lock()
	defer r.evictMu.Unlock()
	e, ok := r.evictions[exporter]
	if !ok {
		e = &evictions{skipped: map[types.UID]bool{}, refusals: map[types.UID]string{}}
		r.evictions[exporter] = e
	}
	return e
}

// forgetEvictions drops exporter's memory (deleted, or restartOnRefusal off).
func (r *Reconciler) forgetEvictions(exporter string) {
	r.evictMu.Lock()
	defer r.evictMu.Unlock()
	delete(r.evictions, exporter)
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
// them and the webhook gives the new pods the agent at start. One pod of the
// exporter at a time: the next only once the previous one is gone and its
// replacement, if any, runs and is ready, and only while every pod the
// exporter matches is running and ready and none is being deleted. A pod
// without a controller is never evicted (it would only be deleted). A
// refused eviction (429) is retried with backoff. What it does is said in
// p.restartNote (the Ready message), in Events and in the log.
func (r *Reconciler) restartRefused(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, p *plan) {
	key := ex.Namespace + "/" + ex.Name
	if !p.spec.Injection.RestartOnRefusal || p.spec.Injection.Mode != jmxv1alpha1.InjectionModeBoth {
		r.forgetEvictions(key)
		return
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
	st := r.evictionsOf(key)
	log := sdk.LoggerFrom(ctx)
	rec := sdk.EventRecorderFrom(ctx)
	podRef := func(pod *corev1.Pod) *corev1.Pod {
		ref := pod.DeepCopy()
		ref.APIVersion, ref.Kind = "v1", "Pod"
		return ref
	}
	if st.generation != ex.Generation {
		st.stopped, st.generation = "", ex.Generation
	}
	var notes []string
	var candidates []*corev1.Pod
	var bare []string
	sort.Slice(p.refusedPods, func(i, j int) bool { return p.refusedPods[i].Name < p.refusedPods[j].Name })
	for _, pod := range p.refusedPods {
		if metav1.GetControllerOf(pod) != nil {
			candidates = append(candidates, pod)
			continue
		}
		bare = append(bare, pod.Name)
		if !st.skipped[pod.UID] {
			st.skipped[pod.UID] = true
			msg := fmt.Sprintf("pod %s refuses a live attach and has no controller: evicting it would only delete it, so restartOnRefusal leaves it; "+
				"recreate it yourself, and the new pod gets the agent at start", pod.Name)
			log.Warnf("operator: %s: %s", key, msg)
			rec.Event(podRef(pod), corev1.EventTypeWarning, EventEvictionSkipped, msg)
			rec.Event(ex, corev1.EventTypeWarning, EventEvictionSkipped, msg)
		}
	}
	if len(bare) > 0 {
		notes = append(notes, fmt.Sprintf("pods %s have no controller and are not evicted (an eviction would only delete them): recreate them yourself", limitList(bare, 5)))
	}
	defer func() { p.restartNote = strings.Join(notes, "; ") }()
	requeue := func(d time.Duration) { p.retryIn = minPositive(p.retryIn, d) }

	if last := st.last; last != nil {
		if present(p, last.uid) {
			notes = append(notes, fmt.Sprintf("evicted pod %s at %s; waiting until it is gone", last.pod, last.at.UTC().Format(time.RFC3339)))
			requeue(10 * time.Second)
			return
		}
		if last.goneAt.IsZero() {
			last.goneAt = time.Now()
		}
		repl := replacementOf(p, last)
		switch {
		case repl == nil && time.Since(last.goneAt) < replacementWait:
			notes = append(notes, fmt.Sprintf("evicted pod %s; waiting for its %s %s to replace it", last.pod, last.owner.Kind, last.owner.Name))
			requeue(10 * time.Second)
			return
		case repl != nil && !podReady(repl):
			notes = append(notes, fmt.Sprintf("evicted pod %s; waiting until its replacement %s runs and is ready", last.pod, repl.Name))
			requeue(10 * time.Second)
			return
		case repl != nil:
			if _, ok, _ := atstart.ParseRecord(repl); !ok {
				st.stopped = fmt.Sprintf("pod %s, which replaced the evicted pod %s, was created without the agent at start (is the operator's admission webhook "+
					"running and reachable? the warnings of the pod's creation may say why): no more pods are evicted until the exporter's spec changes or the operator restarts",
					repl.Name, last.pod)
				log.Warnf("operator: %s: restartOnRefusal: %s", key, st.stopped)
				rec.Event(ex, corev1.EventTypeWarning, EventRestartOnRefusalStopped, st.stopped)
			}
		}
		st.last = nil
	}
	if st.stopped != "" {
		notes = append(notes, st.stopped)
		return
	}
	if len(candidates) == 0 {
		return
	}
	if !p.mayAct() {
		// The webhook would not give a recreated pod the agent either.
		notes = append(notes, "waiting: the exporter cannot give pods the agent at start now (see its ConfigValid and Degraded conditions)")
		return
	}
	if p.atStartClaimed {
		// A replacement created now would be created without the agent:
		// the change is being tried at start on one pod first.
		notes = append(notes, "waiting: the exporter's change is being tried on one pod, given the agent at its start, first")
		requeue(10 * time.Second)
		return
	}
	if len(p.terminating) > 0 {
		notes = append(notes, fmt.Sprintf("waiting: pod %s is being deleted (one pod at a time)", p.terminating[0].Name))
		requeue(10 * time.Second)
		return
	}
	for _, pod := range p.matched {
		if !podReady(pod) {
			notes = append(notes, fmt.Sprintf("waiting: pod %s is not running and ready (one pod at a time)", pod.Name))
			requeue(30 * time.Second)
			return
		}
	}
	// A pod whose eviction was refused waits for its backoff; the next in
	// line may go meanwhile (nothing of the refused one is under way).
	var pod *corev1.Pod
	for _, c := range candidates {
		if wait := r.retries.wait(evictKey(c)); wait > 0 {
			requeue(wait)
			if why := st.refusals[c.UID]; why != "" {
				notes = append(notes, fmt.Sprintf("the eviction of pod %s was refused (%s); retried with backoff", c.Name, why))
			}
			continue
		}
		if pod == nil {
			pod = c
		}
	}
	if pod == nil {
		return
	}
	owner := *metav1.GetControllerOf(pod)
	uid := pod.UID
	err := r.opts.Client.CoreV1().Pods(pod.Namespace).EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	})
	switch {
	case err == nil:
		r.retries.forget(evictKey(pod))
		delete(st.refusals, uid)
		siblings := map[types.UID]bool{}
		for _, m := range append(append([]*corev1.Pod{}, p.matched...), p.terminating...) {
			if c := metav1.GetControllerOf(m); c != nil && c.UID == owner.UID {
				siblings[m.UID] = true
			}
		}
		st.last = &evicted{pod: pod.Name, uid: uid, owner: owner, siblings: siblings, at: time.Now()}
		msg := fmt.Sprintf("evicted pod %s, whose JVM refuses a live attach (spec.injection.restartOnRefusal): its %s %s recreates it, and the new pod "+
			"gets the agent at start; the exporter's next refused pod waits until this one is gone and its replacement runs", pod.Name, owner.Kind, owner.Name)
		log.Infof("operator: %s: %s", key, msg)
		rec.Event(podRef(pod), corev1.EventTypeNormal, EventEvicted, msg)
		rec.Event(ex, corev1.EventTypeNormal, EventEvicted, msg)
		notes = append(notes, fmt.Sprintf("evicted pod %s; waiting until it is gone and replaced", pod.Name))
		requeue(5 * time.Second)
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Gone or replaced meanwhile: the next look sees what is there.
		requeue(time.Second)
	default:
		backoff := r.retries.failed(evictKey(pod))
		why := truncateMsg(err.Error(), 500)
		switch {
		case apierrors.IsTooManyRequests(err):
			why = "429, a PodDisruptionBudget allows no disruption now: " + why
		case apierrors.IsForbidden(err):
			why = "forbidden: the operator needs create on pods/eviction (or turn restartOnRefusal off): " + why
		}
		st.refusals[uid] = why
		msg := fmt.Sprintf("the eviction of pod %s (restartOnRefusal) was refused: %s; retried with backoff", pod.Name, why)
		log.Warnf("operator: %s: %s (next in %s)", key, msg, backoff.Round(time.Second))
		rec.Event(podRef(pod), corev1.EventTypeWarning, EventEvictionRefused, msg)
		rec.Event(ex, corev1.EventTypeWarning, EventEvictionRefused, msg)
		notes = append(notes, fmt.Sprintf("the eviction of pod %s was refused (%s); retried with backoff", pod.Name, why))
		requeue(backoff)
	}
}

func evictKey(pod *corev1.Pod) string { return "evict/" + string(pod.UID) }

// present says whether the plan saw the pod with uid (running or being
// deleted).
func present(p *plan, uid types.UID) bool {
	for _, list := range [][]*corev1.Pod{p.matched, p.terminating} {
		for _, pod := range list {
			if pod.UID == uid {
				return true
			}
		}
	}
	return false
}

// replacementOf is the pod of the evicted pod's controller that was not
// among its pods at the eviction (the newest, when several), or nil.
func replacementOf(p *plan, e *evicted) *corev1.Pod {
	var out *corev1.Pod
	for _, pod := range p.matched {
		c := metav1.GetControllerOf(pod)
		if c == nil || c.UID != e.owner.UID || e.siblings[pod.UID] {
			continue
		}
		if out == nil || out.CreationTimestamp.Before(&pod.CreationTimestamp) {
			out = pod
		}
	}
	return out
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
