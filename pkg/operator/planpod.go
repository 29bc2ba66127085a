package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
)

// planPod works out, for one pod the exporter owns, what each selected
// container's current start needs, and queues a job when something does.
//
// A pod that the webhook gave the agent at start is only reported
// (planAtStart). Under mode AtStart nothing is attached: a container start
// without a record is reported as not injected at start, and the agents
// attached earlier (under another mode) are reported but not reconfigured.
func (r *Reconciler) planPod(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, p *plan, pod *corev1.Pod, canInject bool, strategy inject.Strategy) {
	if at, ok, err := atstart.ParseRecord(pod); ok {
		r.planAtStart(ex, p, pod, at, err)
		return
	}
	attach := attachAllowed(p.spec)
	canInject = canInject && attach
	rec := readRecord(pod)
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		p.pods[pod.Name] = podPending
		p.pending = append(p.pending, pod.Name+" (not running)")
		return
	}
	j := &job{exporter: ex.Namespace + "/" + ex.Name, exporterName: ex.Name, pod: pod, spec: p.spec,
		config: p.config, configHash: p.configHash, generation: p.generation, strategy: strategy}
	state := podInjected
	jvms, noJVM, selected := 0, 0, 0
	for _, cs := range pod.Status.ContainerStatuses {
		if !selectedContainer(p.spec.Containers, cs.Name) {
			continue
		}
		selected++
		if cs.State.Running == nil || cs.ContainerID == "" {
			state = worse(state, podPending)
			p.pending = append(p.pending, pod.Name+"/"+cs.Name+" (not running)")
			continue
		}
		c, ok := rec.current(cs.Name, cs.ContainerID)
		key := retryKey(pod, cs.Name, cs.ContainerID)
		retryFailure := ok && c.Failure != nil && c.Generation != 0 && (c.Generation != p.generation || c.ConfigHash != p.configHash)
		switch {
		case ok && c.Failure != nil && (!retryFailure || !canInject):
			state = worse(state, podFailed)
			p.failures = append(p.failures, fmt.Sprintf("%s/%s: %s: %s", pod.Name, cs.Name, c.Failure.Reason, c.Failure.Message))
			if c.Failure.Reason == jmxv1alpha1.ReasonAttachRefused {
				p.attachRefused = append(p.attachRefused, pod.Name+"/"+cs.Name)
				if !slices.Contains(p.refusedPods, pod) {
					p.refusedPods = append(p.refusedPods, pod)
				}
			}
		case retryFailure:
			// A permanent failure met with an earlier generation or config:
			// the change may have fixed it, so it is tried once more.
			state = worse(state, podPending)
			p.pending = append(p.pending, pod.Name+"/"+cs.Name+" (trying again after a change)")
			if wait := r.retries.wait(key); wait > 0 {
				p.retryIn = minPositive(p.retryIn, wait)
				continue
			}
			j.tasks = append(j.tasks, task{container: cs, previous: c, hadRecord: ok, retryFailure: true})
		case ok && !c.settled() && !attach:
			state = worse(state, podNotAtStart)
			p.noteNotAtStart(pod, cs.Name)
		case ok && !c.settled():
			// Only transient attempts so far.
			state = worse(state, podPending)
			p.pending = append(p.pending, fmt.Sprintf("%s/%s (attempt %d failed: %s)", pod.Name, cs.Name, c.Attempts, truncateMsg(c.LastError, 200)))
			if !canInject {
				continue
			}
			if wait := r.retries.wait(key); wait > 0 {
				p.retryIn = minPositive(p.retryIn, wait)
				continue
			}
			j.tasks = append(j.tasks, task{container: cs, previous: c, hadRecord: ok})
		case ok && c.NoJVM:
			noJVM++
			r.planNoJVM(p, j, pod, cs, c, canInject)
		case ok:
			jvms += len(c.JVMs)
			for _, jr := range c.JVMs {
				// One endpoint per (pod, port), the key the API server
				// enforces: two containers' records that name the same
				// JVM (a shared process namespace seen through either)
				// are one endpoint, the first container's.
				if p.hasEndpoint(pod.Name, jr.Port) {
					continue
				}
				p.endpoints = append(p.endpoints, jmxv1alpha1.MetricsEndpoint{
					Pod: pod.Name, Container: cs.Name, JVM: jr.Main, PID: int32(jr.PID), JVMStartedAt: jr.StartedAt,
					PodIP: pod.Status.PodIP, Port: jr.Port, ContainerID: cs.ContainerID, InjectedAt: derefTime(c.InjectedAt),
					InjectedBy: injectedBy(c),
				})
			}
			if c.Port != 0 && c.Port != p.spec.Port {
				p.portPending = appendOnce(p.portPending, pod.Name)
			}
			refused := c.Rejected != nil && c.Rejected.ConfigHash == p.configHash
			// An agent given at start has no config file to replace.
			if canInject && c.ConfigHash != p.configHash && len(c.JVMs) > 0 && !refused && !c.atStart() {
				if wait := r.retries.wait(key); wait > 0 {
					p.retryIn = minPositive(p.retryIn, wait)
				} else {
					j.tasks = append(j.tasks, task{container: cs, reconfigure: true, previous: c})
				}
			}
		case !attach:
			state = worse(state, podNotAtStart)
			p.noteNotAtStart(pod, cs.Name)
		default:
			state = worse(state, podPending)
			p.pending = append(p.pending, pod.Name+"/"+cs.Name)
			if !canInject {
				continue
			}
			if wait := r.retries.wait(key); wait > 0 {
				p.retryIn = minPositive(p.retryIn, wait)
				continue
			}
			t := task{container: cs, previous: c, hadRecord: ok}
			if rec.Exporter == ex.Name {
				t.earlier = rec.Containers[cs.Name]
			}
			j.tasks = append(j.tasks, t)
		}
	}
	r.retries.keepOnly(pod, pod.Status.ContainerStatuses)
	if jvms > 0 && len(rec.Kept) > 0 {
		p.ownAnnotations = append(p.ownAnnotations, fmt.Sprintf("%s (%s)", pod.Name, strings.Join(rec.Kept, ", ")))
	}
	if selected > 0 && noJVM == selected {
		state = podNoJVM
	} else if state == podInjected && jvms == 0 {
		state = podPending
	}
	p.pods[pod.Name] = state
	if len(j.tasks) > 0 {
		if r.pool.Busy(string(pod.UID)) {
			return // the running job wakes the exporter when it ends
		}
		p.jobs = append(p.jobs, j)
	}
}
