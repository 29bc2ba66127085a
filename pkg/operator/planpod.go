package operator

// planpod.go plans one attached pod: what each selected container's current
// start needs (a load, a reload, a late look, nothing), asking the retry
// policy through queue.

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
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		p.pods[pod.Name] = podPending
		p.pending = append(p.pending, pod.Name+" (not running)")
		return
	}
	pp := podPlan{plan: p, pod: pod, rec: readRecord(pod), exporter: ex.Name, attach: attachAllowed(p.spec), state: podInjected}
	pp.canInject = canInject && pp.attach
	pp.job = &job{exporter: ex.Namespace + "/" + ex.Name, exporterName: ex.Name, pod: pod, spec: p.spec,
		config: p.config, configHash: p.configHash, generation: p.generation, strategy: strategy}
	for _, cs := range pod.Status.ContainerStatuses {
		if !selectedContainer(p.spec.Containers, cs.Name) {
			continue
		}
		pp.selected++
		if cs.State.Running == nil || cs.ContainerID == "" {
			pp.worsen(podPending)
			p.pending = append(p.pending, pod.Name+"/"+cs.Name+" (not running)")
			continue
		}
		r.planContainer(&pp, cs)
	}
	r.retries.keepOnly(pod, pod.Status.ContainerStatuses)
	if pp.jvms > 0 && len(pp.rec.Kept) > 0 {
		p.ownAnnotations = append(p.ownAnnotations, fmt.Sprintf("%s (%s)", pod.Name, strings.Join(pp.rec.Kept, ", ")))
	}
	if pp.selected > 0 && pp.noJVM == pp.selected {
		pp.state = podNoJVM
	} else if pp.state == podInjected && pp.jvms == 0 {
		pp.state = podPending
	}
	p.pods[pod.Name] = pp.state
	if len(pp.job.tasks) > 0 {
		if p.obs.busy(string(pod.UID)) {
			return // the running job wakes the exporter when it ends
		}
		p.jobs = append(p.jobs, pp.job)
	}
}

// podPlan is planPod's work on one running pod: what it found of the pod's
// selected containers, and the job it fills.
type podPlan struct {
	*plan
	pod       *corev1.Pod
	rec       PodRecord
	exporter  string // the exporter's name
	attach    bool   // the mode allows a live attach
	canInject bool   // the exporter may act, and attach
	job       *job
	// state is the pod's worst container state so far; selected, jvms and
	// noJVM count its selected containers, their JVMs, and those found
	// without a JVM.
	state                 podState
	selected, jvms, noJVM int
}

// worsen makes the pod's state s, when s is worse.
func (pp *podPlan) worsen(s podState) { pp.state = worse(pp.state, s) }

// planContainer works out what the current start of the running container
// cs needs, from its record.
func (r *Reconciler) planContainer(pp *podPlan, cs corev1.ContainerStatus) {
	p, pod := pp.plan, pp.pod
	c, ok := pp.rec.current(cs.Name, cs.ContainerID)
	retryFailure := ok && c.Failure != nil && c.Generation != 0 && (c.Generation != p.generation || c.ConfigHash != p.configHash)
	switch {
	case ok && c.Failure != nil && (!retryFailure || !pp.canInject):
		pp.worsen(podFailed)
		p.noteFailure(pod, cs.Name, c.Failure)
	case retryFailure:
		// A permanent failure met with an earlier generation or config:
		// the change may have fixed it, so it is tried once more.
		pp.worsen(podPending)
		p.pending = append(p.pending, pod.Name+"/"+cs.Name+" (trying again after a change)")
		r.queue(p, pp.job, task{container: cs, previous: c, hadRecord: ok, retryFailure: true})
	case ok && !c.settled() && !pp.attach:
		pp.worsen(podNotAtStart)
		p.noteNotAtStart(pod, cs.Name)
	case ok && !c.settled():
		// Only transient attempts so far.
		pp.worsen(podPending)
		p.pending = append(p.pending, fmt.Sprintf("%s/%s (attempt %d failed: %s)", pod.Name, cs.Name, c.Attempts, truncateMsg(c.LastError, 200)))
		if pp.canInject {
			r.queue(p, pp.job, task{container: cs, previous: c, hadRecord: ok})
		}
	case ok && c.NoJVM:
		pp.noJVM++
		r.planNoJVM(p, pp.job, pod, cs, c, pp.canInject)
	case ok:
		pp.jvms += len(c.JVMs)
		r.planLoaded(pp, cs, c)
	case !pp.attach:
		pp.worsen(podNotAtStart)
		p.noteNotAtStart(pod, cs.Name)
	default:
		pp.worsen(podPending)
		p.pending = append(p.pending, pod.Name+"/"+cs.Name)
		if !pp.canInject {
			return
		}
		t := task{container: cs, previous: c, hadRecord: ok}
		if pp.rec.Exporter == pp.exporter {
			t.earlier = pp.rec.Containers[cs.Name]
		}
		r.queue(p, pp.job, t)
	}
}

// noteFailure notes the permanent failure f of the pod's container.
func (p *plan) noteFailure(pod *corev1.Pod, container string, f *Failure) {
	p.failures = append(p.failures, fmt.Sprintf("%s/%s: %s: %s", pod.Name, container, f.Reason, f.Message))
	if f.Reason == jmxv1alpha1.ReasonAttachRefused {
		p.attachRefused = append(p.attachRefused, pod.Name+"/"+container)
		if !slices.Contains(p.refusedPods, pod) {
			p.refusedPods = append(p.refusedPods, pod)
		}
	}
}

// planLoaded lists the endpoints of the container start c, whose JVMs have
// the agent, and queues the current config for its agents when they serve
// an earlier one.
func (r *Reconciler) planLoaded(pp *podPlan, cs corev1.ContainerStatus, c ContainerRecord) {
	p, pod := pp.plan, pp.pod
	for _, jr := range c.JVMs {
		// One endpoint per (pod, port), the key the API server enforces:
		// two containers' records that name the same JVM (a shared
		// process namespace seen through either) are one endpoint, the
		// first container's.
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
	if pp.canInject && c.ConfigHash != p.configHash && len(c.JVMs) > 0 && !refused && !c.atStart() {
		r.queue(p, pp.job, task{container: cs, reconfigure: true, previous: c})
	}
}

// queue adds t to the job, unless the container start waits for the
// backoff of a transient failure: then the plan looks again when it ends.
// Every task a plan makes asks the retry policy here.
func (r *Reconciler) queue(p *plan, j *job, t task) {
	if wait := r.retries.wait(retryKey(j.pod, t.container.Name, t.container.ContainerID)); wait > 0 {
		p.retryIn = minPositive(p.retryIn, wait)
		return
	}
	j.tasks = append(j.tasks, t)
}
