package operator

// observe.go reads what the pods' records say of the current generation and
// config (deaths, refusals, proven or landed loads), and judge turns that
// into the breaker and ConfigValid.

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

// observe reads, from one pod's record and container statuses, what the
// agents say about the current generation and config: a JVM that ended
// during or soon after a load, a config an agent refused, which agents run
// it (and for how long), and which still run an earlier one.
func (r *Reconciler) observe(p *plan, pod *corev1.Pod) {
	if p.configHash == "" {
		return
	}
	r.observeAtStart(p, pod)
	rec := readRecord(pod)
	now := p.obs.now
	window := r.opts.BreakerWindow
	for _, cs := range pod.Status.ContainerStatuses {
		c, ok := rec.Containers[cs.Name]
		if ok && c.atStart() {
			p.noteAtStartRefusal(pod.Name, cs.Name, c)
		}
		if !ok || c.atStart() {
			// An agent given at start is not a load of the operator's: its
			// JVM's end trips no breaker (the agent at start never stops a
			// JVM), and its config is judged from the pod's atstart.Record.
			continue
		}
		where := pod.Name + "/" + cs.Name
		key := c.Generation == p.generation && c.ConfigHash == p.configHash
		if key {
			p.noteDeath(pod.Name, cs, c, window)
		}
		// A config the agent refused, at a load or a reload.
		if c.Failure != nil && c.Failure.Reason == jmxv1alpha1.ReasonConfigInvalid && c.ConfigHash == p.configHash {
			p.noteRejected(pod.Name, cs.Name, c.Failure.Message)
		}
		if rj := c.Rejected; rj != nil && rj.ConfigHash == p.configHash && rj.Reason == jmxv1alpha1.ReasonConfigRejected {
			p.noteRejected(pod.Name, cs.Name, rj.Message)
		}
		// An attempt that failed transiently on the current start may have
		// reached the JVM: until the window has passed, only that pod is
		// tried (again).
		if key && c.ContainerID == cs.ContainerID && !c.settled() && c.AttemptedAt != nil &&
			now.Sub(c.AttemptedAt.Add(time.Second)) < window {
			if p.trying == nil {
				p.trying = map[string]bool{}
			}
			p.trying[pod.Name] = true
		}
		// The agents of the container's current start.
		if c.ContainerID != cs.ContainerID || cs.State.Running == nil || len(c.JVMs) == 0 {
			continue
		}
		p.noteAgents(where, c, now, window)
	}
}

// noteDeath notes the JVM of the pod's container cs that ended during a
// load under the current generation and config (c, its record), or within
// the breaker window after the last touch (touchedAt).
func (p *plan) noteDeath(pod string, cs corev1.ContainerStatus, c ContainerRecord, window time.Duration) {
	if c.Failure != nil && c.Failure.Reason == jmxv1alpha1.ReasonJVMEnded {
		msg := "the JVM ended while its agent was being loaded: " + c.Failure.Message
		if term := terminationOf(cs, c.ContainerID); term != nil {
			msg += "; the container's last state: " + describeTermination(term)
		}
		p.deaths = append(p.deaths, jmxv1alpha1.CircuitBreaker{Pod: pod, Container: cs.Name, ContainerID: c.ContainerID, Message: msg})
		return
	}
	at, what := touchedAt(c)
	if at == nil {
		return
	}
	if term := terminationOf(cs, c.ContainerID); term != nil && !stoppedOnRequest(term) &&
		term.FinishedAt.Sub(at.Time) <= window {
		after := term.FinishedAt.Sub(at.Time).Round(time.Second)
		if after < 0 {
			after = 0
		}
		p.deaths = append(p.deaths, jmxv1alpha1.CircuitBreaker{Pod: pod, Container: cs.Name, ContainerID: c.ContainerID,
			Message: fmt.Sprintf("the JVM ended %s after %s; the container's last state: %s", after, what, describeTermination(term))})
	}
}

// noteAgents notes what the agents of a container's current start (where,
// "pod/container"; c, its record) serve: the current config (and, under
// the current generation, for how long), a refusal of it, or an earlier
// one.
func (p *plan) noteAgents(where string, c ContainerRecord, now time.Time, window time.Duration) {
	switch {
	case c.ConfigHash == p.configHash:
		if c.Note != "" {
			p.notes = append(p.notes, where+": "+c.Note)
		}
		if c.Generation == p.generation {
			// Records keep whole seconds: the window counts from the end
			// of the second of the load.
			if at := c.loadedAt().Add(time.Second); now.Sub(at) >= window {
				p.proven = true
			} else if at.After(p.landedAt) {
				p.landedAt = at
			}
		}
	case c.Rejected != nil && c.Rejected.ConfigHash == p.configHash:
		p.refused = append(p.refused, fmt.Sprintf("%s: %s: %s", where, c.Rejected.Reason, c.Rejected.Message))
	default:
		p.stale = append(p.stale, where)
	}
}

// touchedAt is when the record's container start was last touched in a way
// that could harm its JVM: its agent's load, or an attempt that failed
// transiently (it may have reached the JVM). Failures met before any signal,
// and containers without a JVM, do not count.
func touchedAt(c ContainerRecord) (*metav1.Time, string) {
	switch {
	case c.InjectedAt != nil && len(c.JVMs) > 0:
		return c.InjectedAt, "its agent was loaded"
	case !c.settled() && c.AttemptedAt != nil:
		return c.AttemptedAt, "an attempt to load the agent (" + truncateMsg(c.LastError, 300) + ")"
	}
	return nil, ""
}

func (p *plan) noteRejected(pod, container, msg string) {
	if p.rejectedConfig == nil {
		p.rejectedConfig = &jmxv1alpha1.RejectedConfig{ConfigSHA256: p.configSHA, Pod: pod, Container: container,
			Message: truncateMsg(msg, 4000), RejectedAt: metav1.NewTime(p.obs.now)}
	}
}

// terminationOf returns how the container start id ended, when the
// container status still shows it (its current state, or the last one).
func terminationOf(cs corev1.ContainerStatus, id string) *corev1.ContainerStateTerminated {
	for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
		if t != nil && t.ContainerID == id && id != "" {
			return t
		}
	}
	return nil
}

// stoppedOnRequest says whether the container ended on SIGTERM (exit 143):
// the kubelet stopping it (a deletion, a failed liveness probe) or a person
// asking it to stop. No agent sends SIGTERM, so such an end does not trip the
// breaker.
func stoppedOnRequest(t *corev1.ContainerStateTerminated) bool {
	return t.ExitCode == 143 || t.Signal == 15
}

func describeTermination(t *corev1.ContainerStateTerminated) string {
	s := fmt.Sprintf("exit code %d", t.ExitCode)
	if t.Signal != 0 {
		s += fmt.Sprintf(", signal %d", t.Signal)
	}
	if t.Reason != "" {
		s += ", reason " + t.Reason
	}
	if m := strings.TrimSpace(t.Message); m != "" {
		s += ", message " + strconv.Quote(truncateMsg(m, 1500))
	}
	return s
}

// judge turns what observe found into verdicts: an agent's refusal of the
// config makes ConfigValid False for it, and a JVM that ended opens the
// circuit breaker. Both are kept in the status.
func (r *Reconciler) judge(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, p *plan) {
	if p.rejectedConfig != nil {
		if rc := ex.Status.RejectedConfig; rc == nil || rc.ConfigSHA256 != p.configSHA {
			p.configValid = rejectedCondition(p.rejectedConfig)
		} else {
			p.rejectedConfig = nil // known already
		}
	}
	if p.breakerOpen || len(p.deaths) == 0 || p.configValid.Status != metav1.ConditionTrue && p.rejectedConfig == nil {
		return
	}
	sort.Slice(p.deaths, func(i, j int) bool {
		return p.deaths[i].Pod+"/"+p.deaths[i].Container < p.deaths[j].Pod+"/"+p.deaths[j].Container
	})
	b := p.deaths[0]
	if out, ok := p.atStartDeaths[b.Pod+"/"+b.Container]; ok {
		// The JVM ended before any agent code could report: its own last
		// words say why (an unsupported class version, a missing module, a
		// port the application found taken). Read after the plan
		// (addLastOutput): planning reads nothing but what was observed.
		p.breakerOutput = &out
	}
	b.Generation, b.ConfigSHA256, b.OpenedAt = p.generation, p.configSHA, metav1.NewTime(p.obs.now)
	b.Message = truncateMsg(b.Message, 4000)
	p.breaker, p.breakerOpen = &b, true
}

// addLastOutput adds to the breaker a look opened the output of the JVM
// whose death at start opened it (judge), read from its container's log:
// the one read of the API server that a look's verdict asks for, done after
// the plan and before the status is written.
func (r *Reconciler) addLastOutput(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, p *plan) {
	if p.breaker == nil || p.breakerOutput == nil {
		return
	}
	b := p.breaker
	b.Message = truncateMsg(b.Message+"; "+r.lastOutput(ctx, ex.Namespace, b.Pod, b.Container, p.breakerOutput.previous), 4000)
}
