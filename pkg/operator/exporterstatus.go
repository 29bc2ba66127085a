package operator

// exporterstatus.go computes an exporter's status from a plan and writes it:
// the Events of conditions that turn bad, and a status the API server refuses.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
)

// writeStatus computes the status from the plan and writes it through the
// status subresource when it changed, at the pace statusPacer sets; it
// records an Event when a condition it writes turns bad. It returns how long
// until the exporter must be looked at again for a change that waits (0:
// none waits).
func (r *Reconciler) writeStatus(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, p *plan) (time.Duration, error) {
	counts := p.counts()
	r.metrics.setExporter(ex.Namespace, ex.Name, len(p.endpoints), counts)
	old := ex.Status.DeepCopy()
	st := r.status(ctx, ex, p, counts)
	r.conditions.set(ex.Namespace, ex.Name, st.Conditions)

	// A status the API server refused before is not sent again: the
	// reduced one is.
	key := ex.Namespace + "/" + ex.Name
	fp := statusFingerprint(st)
	var known *refusal
	r.memory.with(key, func(m *exporterMemory) { known = m.refused })
	if known != nil && known.fingerprint == fp {
		st = reducedStatus(st, known.message)
		keepTransitionTimes(st, old)
	}
	write, wait := r.pacer.due(key, changeOf(old, st), time.Now())
	if !write {
		return wait, nil
	}

	r.eventBadConditions(ctx, ex, old, st, p)
	ex.Status = *st
	err := action.UpdateStatus(ctx, ex)
	if apierrors.IsInvalid(err) {
		var done bool
		if done, err = r.writeReduced(ctx, ex, old, st, key, fp, err); done {
			return 0, nil
		}
	}
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return 0, sdk.RequeueAfter(0)
		}
		return 0, fmt.Errorf("update status: %w", err)
	}
	r.pacer.wrote(key, time.Now())
	return 0, nil
}

// eventBadConditions records a Warning Event (and a log line) for each
// condition of st that is bad and turned (or changed) since old.
func (r *Reconciler) eventBadConditions(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, old, st *jmxv1alpha1.PrometheusJmxExporterStatus, p *plan) {
	rec := sdk.EventRecorderFrom(ctx)
	for _, c := range st.Conditions {
		bad := c.Type == jmxv1alpha1.ConditionDegraded && c.Status == metav1.ConditionTrue ||
			c.Type == jmxv1alpha1.ConditionConfigApplied && c.Status == metav1.ConditionFalse && c.Reason != jmxv1alpha1.ReasonConfigPending &&
				c.Reason != jmxv1alpha1.ReasonConfigAtNextStart && c.Reason != p.configValid.Reason ||
			c.Type == jmxv1alpha1.ConditionConfigValid && c.Status == metav1.ConditionFalse ||
			c.Type == jmxv1alpha1.ConditionReady && (c.Reason == jmxv1alpha1.ReasonNoPodsMatched || c.Reason == jmxv1alpha1.ReasonNoJVMFound ||
				c.Reason == jmxv1alpha1.ReasonNotInjectedAtStart)
		if !bad {
			continue
		}
		prev := findCondition(old.Conditions, c.Type)
		changed := prev == nil || prev.Status != c.Status || prev.Reason != c.Reason || prev.Message != c.Message
		if c.Reason == jmxv1alpha1.ReasonNotInjectedAtStart && prev != nil && prev.Reason == c.Reason {
			// Its list changes with every pod a rollout replaces: one
			// Event when it turns, the condition has the rest.
			changed = false
		}
		if changed {
			rec.Event(ex, corev1.EventTypeWarning, c.Reason, c.Message)
			sdk.LoggerFrom(ctx).Warnf("operator: %s/%s: %s=%s %s: %s", ex.Namespace, ex.Name, c.Type, c.Status, c.Reason, c.Message)
		}
	}
}

// writeReduced answers the API server's refusal (err) of st as invalid:
// sending the same status again gets the same answer, so it is remembered
// (by its fingerprint fp), said, and a reduced status the server accepts is
// written instead (a minimal one when even that is refused). It says
// whether it is done (not even the minimal status was accepted: nothing
// more is tried until the exporter or its pods change), or the write's
// error.
func (r *Reconciler) writeReduced(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, old, st *jmxv1alpha1.PrometheusJmxExporterStatus, key, fp string,
	err error) (bool, error) {
	rec := sdk.EventRecorderFrom(ctx)
	msg := truncateMsg(err.Error(), 2000)
	r.memory.with(key, func(m *exporterMemory) { m.refused = &refusal{fingerprint: fp, message: msg} })
	reduced := reducedStatus(st, msg)
	keepTransitionTimes(reduced, old)
	c := findCondition(reduced.Conditions, jmxv1alpha1.ConditionDegraded)
	rec.Event(ex, corev1.EventTypeWarning, jmxv1alpha1.ReasonStatusRefused, c.Message)
	sdk.LoggerFrom(ctx).Errorf("operator: %s/%s: the API server refused the status as invalid (not sent again unchanged; writing it without metricsEndpoints and portPendingPods): %s",
		ex.Namespace, ex.Name, msg)
	ex.Status = *reduced
	err = action.UpdateStatus(ctx, ex)
	if apierrors.IsInvalid(err) {
		// Even the reduced status is refused: keep only the generation
		// and the conditions, whose messages the schema bounds.
		minimal := &jmxv1alpha1.PrometheusJmxExporterStatus{ObservedGeneration: reduced.ObservedGeneration,
			MatchedPods: reduced.MatchedPods, InjectedPods: reduced.InjectedPods, FailedPods: reduced.FailedPods,
			RestartOnRefusal: reduced.RestartOnRefusal}
		for _, c := range reduced.Conditions {
			c.Message = truncateMsg(c.Message, 1000)
			minimal.Conditions = append(minimal.Conditions, c)
		}
		ex.Status = *minimal
		err = action.UpdateStatus(ctx, ex)
		if apierrors.IsInvalid(err) {
			sdk.LoggerFrom(ctx).Errorf("operator: %s/%s: the API server refused even a minimal status; not retried until the exporter or its pods change: %v",
				ex.Namespace, ex.Name, err)
			r.pacer.wrote(key, time.Now())
			return true, nil
		}
	}
	return false, err
}

// status is the exporter's status as the plan finds it, from its stored
// one: the counts, the bounded samples and the conditions.
func (r *Reconciler) status(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, p *plan, counts map[string]int) *jmxv1alpha1.PrometheusJmxExporterStatus {
	st := ex.Status.DeepCopy()
	st.ObservedGeneration = ex.Generation
	st.MatchedPods = int32(len(p.matched))
	st.InjectedPods = int32(counts[podInjected])
	st.FailedPods = int32(counts[podFailed])
	st.MetricsEndpoints, st.MetricsEndpointCount = endpointSample(p.endpoints)
	st.PortPendingPods, st.PortPendingPodCount = nameSample(p.portPending)
	if c := st.AtStartCanary; c != nil && c.AttachedPod != "" && !p.attachTrying {
		// The leader's attach canary ended (proven, refused, its pod gone,
		// or the exporter may not act): pods being created are no longer
		// held back by it.
		st.AtStartCanary = nil
	}

	if p.breaker != nil {
		st.CircuitBreaker = p.breaker
	}
	if p.rejectedConfig != nil {
		st.RejectedConfig = p.rejectedConfig
	}
	if pr := st.Proven; p.proven && p.configSHA != "" && (pr == nil || pr.Generation != p.generation || pr.ConfigSHA256 != p.configSHA) {
		st.Proven = &jmxv1alpha1.ProvenChange{Generation: p.generation, ConfigSHA256: p.configSHA, ProvenAt: metav1.Now()}
	}
	// A namespace this operator serves now may have been reported as not
	// served before (by an operator with other --namespaces).
	st.Conditions = slices.DeleteFunc(st.Conditions, func(c metav1.Condition) bool { return c.Type == jmxv1alpha1.ConditionNotServed })
	setCondition(st, p.configValid)
	ready, degraded := optOutConditions(p, ex.Namespace, r.readyCondition(p, counts), r.degradedCondition(p, st.CircuitBreaker))
	setCondition(st, ready)
	setCondition(st, r.configAppliedCondition(p))
	setCondition(st, degraded)
	setPodMonitorCondition(ctx, ex, st)
	return st
}

// counts counts the plan's pods by state.
func (p *plan) counts() map[string]int {
	counts := map[string]int{}
	for _, s := range p.pods {
		counts[string(s)]++
	}
	return counts
}

// reducedStatus is st without the lists the API server can refuse
// (metricsEndpoints, portPendingPods), with Degraded=True, reason
// StatusRefused, quoting the server.
func reducedStatus(st *jmxv1alpha1.PrometheusJmxExporterStatus, serverMsg string) *jmxv1alpha1.PrometheusJmxExporterStatus {
	out := st.DeepCopy()
	msg := fmt.Sprintf("the API server refused this exporter's status as invalid (%s); the operator does not send that status again, and wrote it without "+
		"metricsEndpoints (%d left out) and portPendingPods; the agents themselves are not affected: report this as a bug with the message",
		serverMsg, out.MetricsEndpointCount)
	if d := findCondition(st.Conditions, jmxv1alpha1.ConditionDegraded); d != nil && d.Status == metav1.ConditionTrue && d.Reason != jmxv1alpha1.ReasonStatusRefused {
		msg += fmt.Sprintf("; before that, Degraded was %s: %s", d.Reason, d.Message)
	}
	out.MetricsEndpoints, out.PortPendingPods = nil, nil
	setCondition(out, condition(jmxv1alpha1.ConditionDegraded, true, jmxv1alpha1.ReasonStatusRefused, msg))
	return out
}

// keepTransitionTimes gives each condition of st whose status is the same
// in old old's lastTransitionTime.
func keepTransitionTimes(st, old *jmxv1alpha1.PrometheusJmxExporterStatus) {
	for i := range st.Conditions {
		if o := findCondition(old.Conditions, st.Conditions[i].Type); o != nil && o.Status == st.Conditions[i].Status {
			st.Conditions[i].LastTransitionTime = o.LastTransitionTime
		}
	}
}

// statusFingerprint identifies a status by its content, without the
// conditions' transition times (which change on every computation of a new
// condition).
func statusFingerprint(st *jmxv1alpha1.PrometheusJmxExporterStatus) string {
	c := st.DeepCopy()
	for i := range c.Conditions {
		c.Conditions[i].LastTransitionTime = metav1.Time{}
	}
	for i := range c.MetricsEndpoints {
		c.MetricsEndpoints[i].InjectedAt = metav1.Time{}
	}
	b, _ := json.Marshal(c)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
