package operator

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// atStartDeath is a JVM given the agent at start that ended within the
// breaker window of its start.
type atStartDeath struct {
	// previous is true when the container has started again since (its
	// last output is then the previous start's log).
	previous bool
}

// observeAtStart is observe for a pod given the agent at start under the
// exporter's current generation and config (its atstart.Record says so): a
// selected container whose start ended, not on request and not cleanly,
// within the breaker window, or the agent's init container that failed, is
// a death that opens the circuit breaker (judge), as a JVM that ends after
// a live load does; the agent at start never stops a JVM, but a JVM can end
// before any agent code runs (a class version older than the agent's, a
// runtime without java.instrument, a jar missing from an allowed image, an
// application that finds the agent on its port). A container start whose
// agent serves (its record, written once the agent's line was read) lands
// the change like a load, and proves it after the window.
func (r *Reconciler) observeAtStart(p *plan, pod *corev1.Pod) {
	at, ok, err := atstart.ParseRecord(pod)
	if !ok || err != nil || at.Generation != p.generation || at.ConfigHash != p.configHash {
		return
	}
	window := r.opts.BreakerWindow
	death := func(container, containerID, msg string, previous bool) {
		p.deaths = append(p.deaths, jmxv1alpha1.CircuitBreaker{Pod: pod.Name, Container: container, ContainerID: containerID, Message: msg})
		if p.atStartDeaths == nil {
			p.atStartDeaths = map[string]atStartDeath{}
		}
		p.atStartDeaths[pod.Name+"/"+container] = atStartDeath{previous: previous}
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		if cs.Name != atstart.InitContainerName {
			continue
		}
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t != nil && t.ExitCode != 0 {
				death(cs.Name, t.ContainerID, "the agent's init container, which copies the agent jar for the JVMs given it at start, failed: "+
					describeTermination(t), t == cs.LastTerminationState.Terminated)
				break
			}
		}
	}
	rec := readRecord(pod)
	now := p.obs.now
	for _, cs := range pod.Status.ContainerStatuses {
		if !slices.Contains(at.Containers, cs.Name) {
			continue
		}
		if t, previous := endedSoonAfterStart(cs, window); t != nil {
			msg := "the JVM, given the agent at start, could not start; the container's last state: " + describeTermination(t)
			if !t.StartedAt.IsZero() {
				msg = fmt.Sprintf("the JVM, given the agent at start, ended %s after it started; the container's last state: %s",
					max(t.FinishedAt.Sub(t.StartedAt.Time), 0).Round(time.Second), describeTermination(t))
			}
			death(cs.Name, t.ContainerID, msg, previous)
		}
		c, ok := rec.Containers[cs.Name]
		if !ok || !c.atStart() || c.ContainerID != cs.ContainerID || cs.State.Running == nil || len(c.JVMs) == 0 || c.Failure != nil ||
			c.ConfigHash != p.configHash || c.Generation != p.generation {
			continue
		}
		// Records keep whole seconds: the window counts from the end of the
		// second of the start.
		if landed := c.loadedAt().Add(time.Second); now.Sub(landed) >= window {
			p.proven = true
		} else {
			if landed.After(p.landedAt) {
				p.landedAt = landed
			}
			// Nothing else may wake the exporter when the window has passed
			// (no job runs for a pod given the agent at start), and the
			// pods created meanwhile wait for the proof.
			p.retryIn = minPositive(p.retryIn, max(landed.Add(window).Sub(now), 0)+time.Second)
		}
	}
}

// endedSoonAfterStart returns the container's start that ended, not on
// request (SIGTERM) and not cleanly (exit 0: a JVM that finished its work),
// within window of its start or before it could start, with previous true
// when that start is the last one and not the current; nil when there is
// none.
func endedSoonAfterStart(cs corev1.ContainerStatus, window time.Duration) (*corev1.ContainerStateTerminated, bool) {
	for i, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
		if t == nil || t.ExitCode == 0 || stoppedOnRequest(t) {
			continue
		}
		if t.StartedAt.IsZero() || t.FinishedAt.Sub(t.StartedAt.Time) <= window {
			return t, i == 1
		}
	}
	return nil, false
}

// lastOutputBytes bounds what lastOutput reads of a container's log.
const lastOutputBytes = 2048

// lastOutput is the end of what the container's previous (or current)
// start printed, for the breaker's message: at most 20 lines and
// lastOutputBytes, on one line, control characters replaced. It is read
// through the API server (pods/log); a failure to read says so instead.
func (r *Reconciler) lastOutput(ctx context.Context, namespace, pod, container string, previous bool) string {
	if r.opts.Client == nil {
		return "its output could not be read: no client"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rc, err := r.opts.Client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{
		Container: container, Previous: previous, TailLines: ptr.To[int64](20), LimitBytes: ptr.To[int64](lastOutputBytes),
	}).Stream(ctx)
	if err != nil {
		return "its output could not be read: " + truncateMsg(err.Error(), 300)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, lastOutputBytes))
	if err != nil && len(b) == 0 {
		return "its output could not be read: " + truncateMsg(err.Error(), 300)
	}
	out := oneLine(string(b))
	if out == "" {
		return "it printed nothing"
	}
	return "its last output: " + out
}

// oneLine turns untrusted output into one line of printable text: line
// ends become " | ", other control and invalid characters "?".
func oneLine(s string) string {
	s = strings.TrimSpace(strings.ReplaceAll(s, "\r\n", "\n"))
	var b strings.Builder
	for _, c := range s {
		switch {
		case c == '\n':
			b.WriteString(" | ")
		case c == unicode.ReplacementChar || !unicode.IsPrint(c) && c != ' ':
			b.WriteByte('?')
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

// claimedAtStart notes in the plan whether a pod being created tries the
// change at start (attach then waits, gate), or the leader's attach canary
// holds the claim (claimForAttach).
func (r *Reconciler) claimedAtStart(ex *jmxv1alpha1.PrometheusJmxExporter, p *plan) {
	c := ex.Status.AtStartCanary
	holds := !p.proven && claimHolds(c, &p.verdict, r.atStartClaimFor(), p.obs.now)
	p.atStartClaimed = holds && c.AttachedPod == ""
	if holds && c.AttachedPod != "" {
		p.attachClaim = c
	}
}

// harmedTry is replaceHarmed's memory of one pod: when to try its eviction
// again, how often it failed, and what was last said of it.
type harmedTry struct {
	next     time.Time
	attempts int
	said     string
	at       time.Time
}

// replaceHarmed has the pod whose JVM, given the agent at start, opened the
// exporter's circuit breaker replaced by its controller: it evicts the pod
// (the eviction API, so that PodDisruptionBudgets apply), and the webhook,
// the breaker being open, creates the new pod without the agent. So a
// change that harms JVMs at start harms one pod, once, and not for long. A
// pod without a controller is left (an eviction would only delete it) and
// said so; a refused eviction is retried with backoff. Each outcome is an
// Event on the exporter and the pod, and a log line.
func (r *Reconciler) replaceHarmed(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, p *plan) {
	if p.breaker != nil {
		// Opened by this look: the breaker is kept in the status first,
		// and the pod evicted at the next look. Evicted before the status
		// write succeeded, the pod (and with it the death) would be gone
		// and the breaker never written (seen in make test: a conflict).
		p.retryIn = minPositive(p.retryIn, time.Second)
		return
	}
	cb := ex.Status.CircuitBreaker
	if !p.breakerOpen || cb == nil || !p.podsRead {
		return
	}
	pod := harmedAtStart(p, cb)
	if pod == nil {
		return
	}
	r.evictMu.Lock()
	defer r.evictMu.Unlock()
	try := r.harmedTryOf(pod.UID)
	say := func(typ, reason, msg string) { sayHarmed(ctx, ex, pod, try, typ, reason, msg) }
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		say(corev1.EventTypeWarning, jmxv1alpha1.ReasonHarmedPodNotReplaced, fmt.Sprintf(
			"pod %s, whose JVM ended after it was given the agent at start, has no controller: evicting it would only delete it, so it is left; "+
				"delete it and create it again: the circuit breaker being open, it is created without the agent", pod.Name))
		return
	}
	if wait := time.Until(try.next); wait > 0 {
		p.retryIn = minPositive(p.retryIn, wait)
		return
	}
	err := evictOnce(ctx, r.opts.Client, pod)
	switch {
	case err == nil:
		say(corev1.EventTypeNormal, jmxv1alpha1.ReasonHarmedPodReplaced, fmt.Sprintf(
			"evicted pod %s, whose JVM ended after it was given the agent at start (%s): its %s %s recreates it, without the agent while the circuit breaker is open",
			pod.Name, truncateMsg(cb.Message, 500), owner.Kind, owner.Name))
		try.next = time.Now().Add(30 * time.Second)
		p.retryIn = minPositive(p.retryIn, 5*time.Second)
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		p.retryIn = minPositive(p.retryIn, time.Second)
	default:
		d := backoff(try.attempts)
		try.attempts++
		try.next = time.Now().Add(d)
		why := truncateMsg(err.Error(), 500)
		switch {
		case apierrors.IsTooManyRequests(err):
			why = "429, a PodDisruptionBudget allows no disruption now: " + why
		case apierrors.IsForbidden(err):
			why = "forbidden: the operator needs create on pods/eviction: " + why
		}
		say(corev1.EventTypeWarning, jmxv1alpha1.ReasonHarmedPodNotReplaced, fmt.Sprintf(
			"pod %s, whose JVM ended after it was given the agent at start, could not be evicted (%s); retried with backoff: delete it to have it replaced now",
			pod.Name, why))
		p.retryIn = minPositive(p.retryIn, d)
	}
}

// harmedAtStart is the pod of the open breaker cb when the plan matched it
// and it was given the agent at start under the breaker's change, or nil
// (gone: replaced, or deleted by someone; or not harmed at start).
func harmedAtStart(p *plan, cb *jmxv1alpha1.CircuitBreaker) *corev1.Pod {
	var pod *corev1.Pod
	for _, m := range p.matched {
		if m.Name == cb.Pod {
			pod = m
		}
	}
	if pod == nil {
		return nil
	}
	at, ok, err := atstart.ParseRecord(pod)
	if !ok || err != nil || at.Generation != cb.Generation || !sameConfig(at.ConfigHash, cb.ConfigSHA256) {
		return nil
	}
	return pod
}

// harmedTryOf is replaceHarmed's memory of the pod with uid, created when
// missing; entries older than an hour go. r.evictMu must be held.
func (r *Reconciler) harmedTryOf(uid types.UID) *harmedTry {
	if r.harmed == nil {
		r.harmed = map[types.UID]*harmedTry{}
	}
	for u, t := range r.harmed {
		if time.Since(t.at) > time.Hour {
			delete(r.harmed, u)
		}
	}
	try := r.harmed[uid]
	if try == nil {
		try = &harmedTry{at: time.Now()}
		r.harmed[uid] = try
	}
	return try
}

// sayHarmed says what replaceHarmed did to pod (a log line, an Event on
// the pod and on the exporter), unless it said the same last time.
func sayHarmed(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, pod *corev1.Pod, try *harmedTry, typ, reason, msg string) {
	if try.said == reason+msg {
		return
	}
	try.said = reason + msg
	sdk.LoggerFrom(ctx).Warnf("operator: %s/%s: %s", ex.Namespace, ex.Name, msg)
	rec := sdk.EventRecorderFrom(ctx)
	rec.Event(podRef(pod), typ, reason, msg)
	rec.Event(ex, typ, reason, msg)
}
