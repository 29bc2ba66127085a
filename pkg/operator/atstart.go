package operator

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// AtStartInput is the operator's atstart.Chooser: what the admission webhook
// injects into pod, which is being created. The exporter is the one that
// owns the pod as the reconciler decides it (of the exporters in the pod's
// namespace whose selector matches it, the oldest, then the first by name);
// it must have spec.injection.mode AtStart or Both. An older exporter in
// mode Attach keeps the pod (a younger one that selects it too reports
// SelectorConflict), so the pod is then left unchanged, as it is when no
// exporter selects it or its namespace is not served.
//
// A pod or namespace whose owner opted out (labelled
// jmx.handlerkit.dev/inject=false, optedOut) is left unchanged; when its
// namespace cannot be read the answer is false and an error saying so.
//
// The pod gets the agent only when the exporter could be acted on now: its
// config loads and validates as the reconciler loads it (and fits
// inject.EncodeConfig's limits), no agent refused that config
// (status.rejectedConfig), its circuit breaker is closed for its generation
// and config, and its spec.agent is allowed. Otherwise the answer is false
// and an error that says why; the webhook admits the pod unchanged with
// that warning, and the reconciler later reports the pod (NotInjectedAtStart
// under AtStart; attached under Both).
//
// Exporters and ConfigMaps are read from the operator's caches while it
// leads. Every replica serves the webhook: one that does not lead reads
// the exporters from its admission cache (RunAdmissionCache) once that is
// synced, else from the API server (one exporter list per namespace at a
// time, shared by the creations that wait for it, and one exporter), and a
// ConfigMap from the API server per pod creation. No lock is held around
// any of these reads.
func (r *Reconciler) AtStartInput(ctx context.Context, pod *corev1.Pod) (atstart.Input, bool, error) {
	if pod == nil || pod.Namespace == "" {
		return atstart.Input{}, false, nil
	}
	if _, injected := pod.Annotations[atstart.AnnotationInjected]; injected {
		// Injected already (a reinvocation, or a dry run of the patched
		// pod): Mutate leaves it as it is, and no canary is claimed for it.
		return atstart.Input{}, false, nil
	}
	if served := servedNamespaces(r.opts.Namespaces); len(served) > 0 && !slices.Contains(served, pod.Namespace) {
		return atstart.Input{}, false, nil
	}
	exporters, err := r.admissionExporters(ctx, pod.Namespace)
	if err != nil {
		return atstart.Input{}, false, fmt.Errorf("cannot read the exporters of namespace %s: %w", pod.Namespace, err)
	}
	owner := ownerOf(pod, exporters)
	if owner == nil {
		return atstart.Input{}, false, nil
	}
	ex := &jmxv1alpha1.PrometheusJmxExporter{}
	ex.Namespace, ex.Name = owner.namespace, owner.name
	if err := r.admissionExporter(ctx, ex); apierrors.IsNotFound(err) {
		return atstart.Input{}, false, nil // deleted meanwhile
	} else if err != nil {
		return atstart.Input{}, false, fmt.Errorf("cannot read exporter %s/%s: %w", owner.namespace, owner.name, err)
	}
	spec := r.defaulted(ex.Spec)
	if mode := spec.Injection.Mode; mode != jmxv1alpha1.InjectionModeAtStart && mode != jmxv1alpha1.InjectionModeBoth {
		return atstart.Input{}, false, nil
	}
	refuse := func(format string, args ...any) (atstart.Input, bool, error) {
		return atstart.Input{}, false, fmt.Errorf("exporter %s: "+format+"; the pod was created without the agent", append([]any{ex.Name}, args...)...)
	}
	// The webhook configuration's selectors leave out the opted-out pods
	// and namespaces already; this is the second guard, for a configuration
	// edited without them.
	if why, err := r.optedOut(ctx, pod); err != nil {
		return refuse("%v", err)
	} else if why != "" {
		return atstart.Input{}, false, nil
	}
	ex, spec, v, err := r.admissionVerdict(ctx, ex, spec)
	if err != nil {
		return refuse("%v", err)
	}
	in := atstart.Input{
		Exporter:   ex.Name,
		Containers: slices.Clone(spec.Containers),
		Port:       spec.Port,
		Config:     v.config,
		Image:      spec.Agent.Image,
		PullPolicy: r.opts.PullPolicy,
		Delivery:   r.opts.AtStartDelivery,
		AgentPath:  r.opts.AgentPath,
		Generation: ex.Generation,
	}
	if !v.proven {
		in.Canary = true
		in.Claim = func(ctx context.Context) error { return r.claimAtStart(ctx, ex, v) }
	}
	return in, true, nil
}

// admissionVerdict is the verdict on ex (verdictOf) for a pod being
// created, with whether the change may be tried at the pod's start now
// (atStartHeld); an error says why the pod gets no agent. The cache may not
// show yet that the change was proven (or that a claim lapsed): while a
// claim holds, the exporter is read from the API server and judged again.
// It returns the exporter and spec it judged.
func (r *Reconciler) admissionVerdict(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, spec jmxv1alpha1.PrometheusJmxExporterSpec) (
	*jmxv1alpha1.PrometheusJmxExporter, jmxv1alpha1.PrometheusJmxExporterSpec, verdict, error) {
	v := r.verdictOf(ctx, ex, spec)
	if reason, msg := v.why(); reason != "" {
		return ex, spec, v, fmt.Errorf("%s: %s", reason, msg)
	}
	err := r.atStartHeld(ex, &v)
	if err == nil {
		return ex, spec, v, nil
	}
	live := &jmxv1alpha1.PrometheusJmxExporter{}
	live.Namespace, live.Name = ex.Namespace, ex.Name
	if lerr := r.read.Get(ctx, live, query.Live()); lerr != nil {
		return ex, spec, v, err
	}
	ex, spec = live, r.defaulted(live.Spec)
	v = r.verdictOf(ctx, ex, spec)
	if reason, msg := v.why(); reason != "" {
		return ex, spec, v, fmt.Errorf("%s: %s", reason, msg)
	}
	if err := r.atStartHeld(ex, &v); err != nil {
		return ex, spec, v, err
	}
	return ex, spec, v, nil
}

// attachAllowed says whether the exporter's mode lets the operator attach
// to running JVMs: every mode but AtStart.
func attachAllowed(spec jmxv1alpha1.PrometheusJmxExporterSpec) bool {
	return spec.Injection.Mode != jmxv1alpha1.InjectionModeAtStart
}

// atStartMode says whether the exporter wants pods injected at start.
func atStartMode(spec jmxv1alpha1.PrometheusJmxExporterSpec) bool {
	return spec.Injection.Mode == jmxv1alpha1.InjectionModeAtStart || spec.Injection.Mode == jmxv1alpha1.InjectionModeBoth
}

// planAtStart reports a pod that the webhook gave the agent at its creation
// (it carries an atstart.Record, whichever exporter it names): each running
// container the record names is an endpoint with injectedBy AtStart on the
// record's port for it. Nothing is ever attached to such a pod, whatever
// the mode: its JVMs have the agent from their start, and a second agent
// would be refused (agent-already-present). The operator's own record and
// scrape annotations are written for it as for an attached pod (a record
// job), so that the prometheus.io annotations and the PodMonitor cover both
// paths. The agent at start read its config at the JVM's start from the
// pod's spec: a changed config or port reaches it only when the pod is next
// created.
func (r *Reconciler) planAtStart(ex *jmxv1alpha1.PrometheusJmxExporter, p *plan, pod *corev1.Pod, at atstart.Record, err error) {
	if err != nil {
		p.pods[pod.Name] = podFailed
		p.failures = append(p.failures, fmt.Sprintf("%s: %s: %v; the pod is never attached while it carries that annotation (its JVMs may have the agent from their start): "+
			"recreate the pod without it", pod.Name, jmxv1alpha1.ReasonAtStartRecordInvalid, err))
		return
	}
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		p.pods[pod.Name] = podPending
		p.pending = append(p.pending, pod.Name+" (not running; given the agent at start)")
		return
	}
	pp := podPlan{plan: p, pod: pod, rec: readRecord(pod), exporter: ex.Name, state: podInjected,
		job: &job{exporter: ex.Namespace + "/" + ex.Name, exporterName: ex.Name, pod: pod, spec: p.spec}}
	for i, name := range at.Containers {
		r.planAtStartContainer(&pp, at, i, name)
	}
	r.agentLines.keepOnly(pod)
	if at.Port != p.spec.Port {
		p.portPending = appendOnce(p.portPending, pod.Name)
		p.atStartPortPending = appendOnce(p.atStartPortPending, pod.Name)
	}
	if at.Exporter != ex.Name {
		p.atStartNotes = append(p.atStartNotes, fmt.Sprintf("pod %s was given the agent at start by exporter %s, with its config", pod.Name, at.Exporter))
	}
	p.noteLeftAlone(pod, at)
	if pp.jvms > 0 && len(pp.rec.Kept) > 0 {
		p.ownAnnotations = append(p.ownAnnotations, fmt.Sprintf("%s (%s)", pod.Name, strings.Join(pp.rec.Kept, ", ")))
	}
	if pp.state == podInjected && pp.jvms == 0 {
		pp.state = podPending
		p.pending = append(p.pending, pod.Name+" (given the agent at start, in no running container)")
	}
	p.pods[pod.Name] = pp.state
	p.atStartPods++
	p.atStartDeliveries.add(pod, at, r.opts.AtStartDelivery)
	if len(pp.job.tasks) > 0 && !p.obs.busy(string(pod.UID)) {
		p.recordJobs = append(p.recordJobs, pp.job)
	}
}

// planAtStartContainer reports the container name, the i-th the record of
// the agent at start (at) names: an endpoint once its agent's verdict is
// known, pending until then (its agent's line is read, agentline.go). A
// record job writes the operator's record of it.
func (r *Reconciler) planAtStartContainer(pp *podPlan, at atstart.Record, i int, name string) {
	p, pod := pp.plan, pp.pod
	cs, ok := containerStatus(pod, name)
	if !ok || cs.State.Running == nil || cs.ContainerID == "" {
		pp.worsen(podPending)
		p.pending = append(p.pending, pod.Name+"/"+name+" (not running; given the agent at start)")
		return
	}
	port := at.Ports[name]
	if port == 0 && i == 0 {
		port = at.Port
	}
	if port == 0 {
		p.atStartNotes = append(p.atStartNotes, fmt.Sprintf("%s/%s: the %s annotation names no port for the container; not reported", pod.Name, name, atstart.AnnotationInjected))
		return
	}
	started := cs.State.Running.StartedAt
	want := ContainerRecord{ContainerID: cs.ContainerID, Port: at.Port, ConfigHash: at.ConfigHash, InjectedAt: &started,
		InjectedBy: jmxv1alpha1.InjectedByAtStart, Generation: at.Generation}
	c, ok := pp.rec.current(name, cs.ContainerID)
	if !ok || !atStartVerdict(c, want) {
		// Not serving until the agent's line says so (agentline.go).
		pp.worsen(podPending)
		if t, due := r.planAgentLine(p, pod, cs, want, port); due {
			pp.job.tasks = append(pp.job.tasks, t)
		}
		return
	}
	if pp.rec.Exporter != pp.exporter {
		pp.job.tasks = append(pp.job.tasks, task{container: cs, atStart: &c, atStartPort: port})
	}
	if c.Failure != nil {
		pp.worsen(podFailed)
		p.failures = append(p.failures, fmt.Sprintf("%s/%s: %s: %s", pod.Name, name, c.Failure.Reason, c.Failure.Message))
		return
	}
	pp.jvms++
	if !p.hasEndpoint(pod.Name, port) {
		p.endpoints = append(p.endpoints, jmxv1alpha1.MetricsEndpoint{
			Pod: pod.Name, Container: name, PodIP: pod.Status.PodIP, Port: port, ContainerID: cs.ContainerID,
			InjectedAt: started, InjectedBy: jmxv1alpha1.InjectedByAtStart,
		})
	}
	if p.configHash != "" && at.ConfigHash != p.configHash {
		p.atStartStale = append(p.atStartStale, pod.Name+"/"+name)
	}
}

// noteLeftAlone notes the pod's selected containers that the webhook left
// alone (see the warnings of the pod's creation): they are not attached
// either.
func (p *plan) noteLeftAlone(pod *corev1.Pod, at atstart.Record) {
	var left []string
	for _, cs := range pod.Status.ContainerStatuses {
		if selectedContainer(p.spec.Containers, cs.Name) && !slices.Contains(at.Containers, cs.Name) {
			left = append(left, cs.Name)
		}
	}
	if len(left) > 0 && len(p.spec.Containers) > 0 {
		why := "the warnings of the pod's creation say why"
		if notes := webhookNotes(pod); notes != "" {
			why = "it said: " + notes
		}
		p.atStartNotes = append(p.atStartNotes, fmt.Sprintf("pod %s: containers %s were not given the agent at start (the webhook left them alone; "+
			"%s) and are not attached", pod.Name, strings.Join(left, ", "), why))
	}
}

func containerStatus(pod *corev1.Pod, name string) (corev1.ContainerStatus, bool) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == name {
			return cs, true
		}
	}
	return corev1.ContainerStatus{}, false
}

// recordAtStart writes the operator's record of a container that got the
// agent at start, and with it the scrape annotations, once its verdict is
// known: a record without one is written only after the agent's line was
// read from the container's log (readAgentVerdict), serving (its JVM) or
// refused (its Failure). Nothing runs in the pod.
func (r *Reconciler) recordAtStart(ctx context.Context, j *job, t task) {
	c := *t.atStart
	read := !c.settled()
	if read {
		var ok bool
		if c, ok = r.readAgentVerdict(ctx, j, t); !ok {
			return
		}
	}
	if _, err := updateRecord(ctx, r.opts.Client, j.pod.Namespace, j.pod.Name, j.pod.UID, func(pr *PodRecord) {
		pr.Exporter = j.exporterName
		pr.Containers[t.container.Name] = c
	}); err != nil {
		r.op.Logger().Warnf("operator: record the agent given at start to %s/%s container %s: %v (tried again at the exporter's next look)",
			j.pod.Namespace, j.pod.Name, t.container.Name, err)
		return
	}
	j.written[t.container.Name] = c
	if r.agentLines.state(j.pod.UID, t.container.Name, t.container.ContainerID).verdict != nil {
		read = true // read by an earlier job, whose record was not written
	}
	r.agentLines.forget(j.pod.UID, t.container.Name, t.container.ContainerID)
	if read {
		r.reportAgentVerdict(j, t.container, c)
	}
}

// notAtStartMessage is the Ready message for mode AtStart's pods that run
// without the agent.
func notAtStartMessage(p *plan) string {
	sort.Strings(p.notAtStart)
	msg := fmt.Sprintf("%d selected containers run without the agent (%s): they were created before the exporter, while the operator's admission webhook "+
		"was unavailable, or were left alone by it (then the pod's %s annotation says why); with spec.injection.mode AtStart they are never attached: "+
		"they get the agent when their pods are next created (for example by a rollout: kubectl rollout restart), or use mode Both to attach them",
		len(p.notAtStart), limitList(p.notAtStart, 10), atstart.AnnotationNotes)
	if len(p.notAtStartWhy) > 0 {
		sort.Strings(p.notAtStartWhy)
		msg += "; the webhook left alone " + limitList(p.notAtStartWhy, 3)
	}
	if p.webhookErr != "" {
		msg += "; " + p.webhookErr
	}
	return msg
}

// noteNotAtStart lists a selected container of pod that runs without the
// agent under mode AtStart, with what the webhook said of the pod, if it
// left it alone.
func (p *plan) noteNotAtStart(pod *corev1.Pod, container string) {
	p.notAtStart = append(p.notAtStart, pod.Name+"/"+container)
	if notes := webhookNotes(pod); notes != "" {
		p.notAtStartWhy = appendOnce(p.notAtStartWhy, fmt.Sprintf("pod %s (%s)", pod.Name, notes))
	}
}

// webhookNotes is what the webhook said of a pod it left without the agent
// (atstart.AnnotationNotes), on one line and short enough for a condition
// message; "" when it said nothing.
func webhookNotes(pod *corev1.Pod) string {
	notes := strings.Join(strings.Fields(strings.ReplaceAll(pod.Annotations[atstart.AnnotationNotes], "\n", "; ")), " ")
	return truncateMsg(notes, 300)
}

// atStartStaleMessage is the ConfigApplied message for agents given at start
// with an earlier config.
func atStartStaleMessage(p *plan) string {
	sort.Strings(p.atStartStale)
	pods := map[string]bool{}
	for _, s := range p.atStartStale {
		pod, _, _ := strings.Cut(s, "/")
		pods[pod] = true
	}
	return fmt.Sprintf("the agents given at start in %d pods (%s) serve an earlier config: an agent given at start reads its config once, when its JVM starts, "+
		"from the pod's spec, so the current config reaches them when the pods are next created (for example by a rollout), not when a container restarts; "+
		"they are never attached to change it", len(pods), limitList(p.atStartStale, 10))
}
