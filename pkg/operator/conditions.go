package operator

// conditions.go builds the status' conditions (Ready, ConfigApplied,
// Degraded) from a plan.

import (
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

func condition(typ string, ok bool, reason, msg string) metav1.Condition {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	if len(msg) > 32000 {
		msg = msg[:32000]
	}
	return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg}
}

func (r *Reconciler) readyCondition(p *plan, counts map[string]int) metav1.Condition {
	ready := func(ok bool, reason, msg string) metav1.Condition {
		return condition(jmxv1alpha1.ConditionReady, ok, reason, msg)
	}
	switch {
	case p.agentErr != "":
		return ready(false, p.agentReason, p.agentErr)
	case p.configValid.Status != metav1.ConditionTrue:
		return ready(false, p.configValid.Reason, "the config is not valid: "+p.configValid.Message)
	case p.strategyErr != "":
		return ready(false, jmxv1alpha1.ReasonStrategyDisabled, p.strategyErr)
	case p.breakerOpen && (counts[podPending] > 0 || counts[podFailed] > 0):
		return ready(false, jmxv1alpha1.ReasonJVMEndedAfterInjection,
			"the circuit breaker is open: no container is injected until the exporter's spec or config changes (see the Degraded condition)")
	case len(p.matched) == 0:
		return ready(false, jmxv1alpha1.ReasonNoPodsMatched,
			"spec.selector matches no pod in this namespace; check the pods' labels")
	case counts[podFailed] > 0 && p.onlyAttachRefused():
		return ready(false, jmxv1alpha1.ReasonAttachRefused, attachRefusedMessage(p))
	case counts[podFailed] > 0:
		return ready(false, jmxv1alpha1.ReasonInjectionFailed, limitList(p.failures, 10))
	case counts[podNotAtStart] > 0:
		return ready(false, jmxv1alpha1.ReasonNotInjectedAtStart, notAtStartMessage(p))
	case counts[podNoJVM] > 0 && counts[podNoJVM]+counts[podConflict] == len(p.matched):
		return p.noJVMCondition()
	case counts[podPending] > 0:
		msg := "waiting for " + limitList(p.pending, 10)
		if p.held != "" {
			msg += "; " + p.held
		}
		return ready(false, jmxv1alpha1.ReasonInjectionPending, msg)
	case counts[podInjected] == 0:
		return ready(false, jmxv1alpha1.ReasonInjectionPending, "no pod is injected yet")
	}
	msg := fmt.Sprintf("%d JVMs in %d pods serve metrics", len(p.endpoints), counts[podInjected])
	if p.atStartPods > 0 {
		msg += " (" + p.atStartDeliveries.summary(p.atStartPods, r.opts.AtStartDelivery) + ")"
	}
	if len(p.atStartNotes) > 0 {
		sort.Strings(p.atStartNotes)
		msg += "; note: " + limitList(p.atStartNotes, 5)
	}
	if len(p.ownAnnotations) > 0 {
		sort.Strings(p.ownAnnotations)
		msg += "; these pods keep their own prometheus.io annotations, so the operator set none there (the agents' ports are in " +
			AnnotationPorts + " and the PodMonitor, if any, scrapes them): " + limitList(p.ownAnnotations, 10)
	}
	return ready(true, jmxv1alpha1.ReasonAllInjected, msg)
}

// configAppliedCondition says whether the loaded agents serve the current
// config.
func (r *Reconciler) configAppliedCondition(p *plan) metav1.Condition {
	applied := func(ok bool, reason, msg string) metav1.Condition {
		return condition(jmxv1alpha1.ConditionConfigApplied, ok, reason, msg)
	}
	sort.Strings(p.refused)
	sort.Strings(p.stale)
	sort.Strings(p.notes)
	switch {
	case p.rejectedConfig != nil || p.configValid.Reason == jmxv1alpha1.ReasonConfigInvalid && len(p.refused) > 0:
		msg := p.configValid.Message
		if len(p.refused) > 0 {
			msg = limitList(p.refused, 5)
		}
		return applied(false, jmxv1alpha1.ReasonConfigRejected, msg+"; those agents keep serving their previous config")
	case len(p.refused) > 0:
		reason := jmxv1alpha1.ReasonConfigRejected
		if parts := strings.SplitN(p.refused[0], ": ", 3); len(parts) == 3 {
			reason = parts[1]
		}
		return applied(false, reason, limitList(p.refused, 5)+"; those agents keep serving their previous config")
	case p.configValid.Status != metav1.ConditionTrue:
		return applied(false, p.configValid.Reason, "the config is not valid; the loaded agents keep serving the config they have: "+p.configValid.Message)
	case len(p.stale) > 0:
		msg := "giving the current config to the agents of " + limitList(p.stale, 10)
		if p.held != "" {
			msg += "; " + p.held
		}
		if len(p.atStartStale) > 0 {
			msg += "; " + atStartStaleMessage(p)
		}
		return applied(false, jmxv1alpha1.ReasonConfigPending, msg)
	case len(p.atStartStale) > 0:
		return applied(false, jmxv1alpha1.ReasonConfigAtNextStart, atStartStaleMessage(p))
	case len(p.notes) > 0:
		return applied(true, jmxv1alpha1.ReasonConfigInUse, "every loaded agent serves the current config; note: "+limitList(p.notes, 5))
	}
	return applied(true, jmxv1alpha1.ReasonConfigInUse, "every loaded agent serves the current config")
}

func (r *Reconciler) degradedCondition(p *plan, cb *jmxv1alpha1.CircuitBreaker) metav1.Condition {
	deg := func(bad bool, reason, msg string) metav1.Condition {
		return condition(jmxv1alpha1.ConditionDegraded, bad, reason, msg)
	}
	switch {
	case p.agentErr != "":
		return deg(true, p.agentReason, p.agentErr)
	case p.strategyErr != "":
		return deg(true, jmxv1alpha1.ReasonStrategyDisabled, p.strategyErr)
	case p.webhookErr != "":
		return deg(true, jmxv1alpha1.ReasonWebhookDisabled, p.webhookErr)
	case p.breakerOpen && cb != nil:
		return deg(true, jmxv1alpha1.ReasonJVMEndedAfterInjection, fmt.Sprintf(
			"pod %s container %s: %s; the circuit breaker is open: no other container is injected until the exporter's spec or config changes",
			cb.Pod, cb.Container, cb.Message))
	case p.restartStopped != "":
		return deg(true, jmxv1alpha1.ReasonRestartOnRefusalStopped, p.restartStopped)
	case len(p.failures) > 0 && p.onlyAttachRefused():
		return deg(true, jmxv1alpha1.ReasonAttachRefused, limitList(p.failures, 10))
	case len(p.failures) > 0:
		return deg(true, jmxv1alpha1.ReasonInjectionFailed, limitList(p.failures, 10))
	case len(p.conflicts) > 0:
		var parts []string
		for other, pods := range p.conflicts {
			sort.Strings(pods)
			parts = append(parts, fmt.Sprintf("exporter %s, which is older, already selects pods %s", other, limitList(pods, 5)))
		}
		sort.Strings(parts)
		// One part per other exporter: at most five, so that the message
		// stays bounded however many exporters overlap this one.
		msg := strings.Join(parts, "; ")
		if len(parts) > 5 {
			msg = strings.Join(parts[:5], "; ") + fmt.Sprintf("; and %d more exporters", len(parts)-5)
		}
		return deg(true, jmxv1alpha1.ReasonSelectorConflict, msg+
			"; those pods are left to it: narrow this exporter's selector or remove the other one")
	case len(p.portPending) > 0:
		msg := fmt.Sprintf(
			"spec.port is %d, but the agents of pods %s still serve an earlier port: a loaded agent cannot change its port; the new one applies when each container restarts",
			p.spec.Port, limitList(p.portPending, 10))
		if len(p.atStartPortPending) > 0 {
			sort.Strings(p.atStartPortPending)
			msg += fmt.Sprintf(" (pods given the agent at start, %s: when the pod is next created)", limitList(p.atStartPortPending, 10))
		}
		return deg(true, jmxv1alpha1.ReasonPortChangePending, msg)
	}
	return deg(false, jmxv1alpha1.ReasonAsExpected, "nothing has failed")
}

func limitList(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:n], ", ") + fmt.Sprintf(" and %d more", len(items)-n)
}

func setCondition(st *jmxv1alpha1.PrometheusJmxExporterStatus, c metav1.Condition) {
	if c.Type == "" {
		return
	}
	now := metav1.Now()
	for i := range st.Conditions {
		old := &st.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status != c.Status {
			old.LastTransitionTime = now
		}
		old.Status, old.Reason, old.Message = c.Status, c.Reason, c.Message
		return
	}
	c.LastTransitionTime = now
	st.Conditions = append(st.Conditions, c)
}

func findCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}
