package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// Reconciler is the exporters' sdk.Handler. Build it with Setup.
type Reconciler struct {
	op         *sdk.Operator
	opts       Options
	read       *query.Reader
	configMaps *configMaps
	pool       *inject.Pool
	metrics    *metrics
	conditions *conditionMetric
	retries    *retries
	strategies map[jmxv1alpha1.InjectionStrategy]inject.Strategy
	// canary maps an exporter (namespace/name) to its job that tries a
	// change first (canaryMu guards it); see gate.
	canaryMu sync.Mutex
	canary   map[string]canaryJob
	// beforeGate, when set (by tests only), runs in plan between reading
	// the pods and gating the jobs.
	beforeGate func(exporter string)
	// podMonitors is true when the operator keeps a PodMonitor per
	// exporter: the cluster serves the kind and Options did not disable it.
	podMonitors bool
	// refused maps an exporter (namespace/name) to the last status the API
	// server refused as invalid, so that the same status is never sent
	// again (refusedMu guards it).
	refusedMu sync.Mutex
	refused   map[string]refusal
	// evictions is restartOnRefusal's memory per exporter (namespace/name;
	// evictionsMu guards the map, evict.go). evictMu is held around a
	// harmed pod's eviction; the pod watch takes evictionsMu only.
	evictionsMu sync.Mutex
	evictMu     sync.Mutex
	evictions   map[string]*evictions
	// harmed is replaceHarmed's memory per pod (evictMu guards it,
	// atstartbreaker.go).
	harmed map[types.UID]*harmedTry
	// pacer decides when a changed status is written (status.go).
	pacer statusPacer
	// selectors keeps the exporters' parsed selectors (selectors.go).
	selectors exporterSelectors
	// admission is the exporters' cache of a replica that does not lead,
	// for the webhook (admissioncache.go).
	admission admissionCache
	// agentLines are the reads of the agents' lines of containers given
	// the agent at start (agentline.go).
	agentLines *agentLineReads
	// namespaces remembers the namespaces' opt-out labels (optout.go).
	namespaces namespaceOptOuts
}

// refusal is a status the API server refused: its fingerprint
// (statusFingerprint) and the server's words.
type refusal struct {
	fingerprint, message string
}

// Wait blocks until every injection job started so far has returned. Jobs
// stop when the handler's context ends (shutdown or lost leadership).
func (r *Reconciler) Wait() { r.pool.Wait() }

// Handle implements sdk.Handler for the exporters watch.
func (r *Reconciler) Handle(ctx context.Context, e sdk.Event) error {
	ex, ok := e.Object.(*jmxv1alpha1.PrometheusJmxExporter)
	if !ok {
		sdk.LoggerFrom(ctx).Warnf("operator: an exporter that its Go type cannot decode (%T); fix it to match the CRD schema", e.Object)
		return nil
	}
	if e.Deleted {
		r.metrics.forgetExporter(ex.Namespace, ex.Name)
		r.conditions.forget(ex.Namespace, ex.Name)
		r.canaryMu.Lock()
		delete(r.canary, ex.Namespace+"/"+ex.Name)
		r.canaryMu.Unlock()
		r.refusedMu.Lock()
		delete(r.refused, ex.Namespace+"/"+ex.Name)
		r.refusedMu.Unlock()
		r.forgetEvictions(ex.Namespace + "/" + ex.Name)
		r.pacer.forget(ex.Namespace + "/" + ex.Name)
		return nil
	}
	if ex.DeletionTimestamp != nil {
		return r.finalize(ctx, ex)
	}
	if _, err := action.AddFinalizer(ctx, nil, ex, Finalizer); err != nil {
		return fmt.Errorf("add finalizer: %w", err)
	}
	plan := r.plan(ctx, ex)
	r.claimForAttach(ctx, ex, plan)
	for _, job := range plan.jobs {
		job := job
		if job.canary {
			// Set before the job starts, so that its end finds it.
			r.setCanary(job.exporter, canaryJob{uid: string(job.pod.UID), pod: job.pod.Name})
		}
		// The job wakes the exporter once its pod's slot is free again, so
		// that the look it triggers sees the job done.
		wake := func() { r.wake(ctx, job.exporter) }
		// Slots go round-robin between exporters (the pool's groups).
		if !r.pool.TryRunFor(ctx, job.exporter, string(job.pod.UID), func(ctx context.Context) { r.runJob(ctx, job) }, wake) && job.canary {
			r.clearCanary(job.exporter, string(job.pod.UID))
		}
	}
	// The records of pods given the agent at start: nothing runs in them,
	// so no change is tried on one first.
	for _, job := range plan.recordJobs {
		job := job
		wake := func() { r.wake(ctx, job.exporter) }
		r.pool.TryRunFor(ctx, job.exporter, string(job.pod.UID), func(ctx context.Context) { r.runJob(ctx, job) }, wake)
	}
	r.restartRefused(ctx, ex, plan)
	r.replaceHarmed(ctx, ex, plan)
	r.releaseDeparted(ctx, ex, plan.departed)
	pmErr := r.ensurePodMonitor(ctx, ex, plan)
	statusIn, err := r.writeStatus(ctx, ex, plan)
	if err != nil {
		return err
	}
	if pmErr != nil {
		return pmErr
	}
	retryIn := plan.retryIn
	if statusIn > 0 {
		retryIn = minPositive(retryIn, statusIn)
	}
	if retryIn > 0 {
		return sdk.RequeueAfter(retryIn)
	}
	return nil
}

// releaseDeparted removes the operator's annotations from the pods that
// left the exporter's selector, and says so in an Event on each pod and on
// the exporter. A pod with a job still running is left to the next look
// (the job wakes the exporter when it ends). Failures are logged and
// retried at the next look.
func (r *Reconciler) releaseDeparted(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, pods []*corev1.Pod) {
	for _, pod := range pods {
		if r.pool.Busy(string(pod.UID)) {
			continue
		}
		changed, err := clearAnnotations(ctx, r.opts.Client, pod, ex.Name)
		if err != nil {
			sdk.LoggerFrom(ctx).Warnf("operator: %s/%s: pod %s left the selector: %v", ex.Namespace, ex.Name, pod.Name, err)
			continue
		}
		if !changed {
			continue
		}
		msg := fmt.Sprintf("pod %s no longer matches the selector of exporter %s: removed the annotations the operator wrote and its record; "+
			"agents already loaded keep running until their containers restart (a java agent cannot be unloaded from a running JVM)", pod.Name, ex.Name)
		sdk.LoggerFrom(ctx).Infof("operator: %s/%s: %s", ex.Namespace, ex.Name, msg)
		ref := pod.DeepCopy()
		ref.APIVersion, ref.Kind = "v1", "Pod"
		rec := sdk.EventRecorderFrom(ctx)
		rec.Event(ref, corev1.EventTypeNormal, "LeftSelector", msg)
		rec.Event(ex, corev1.EventTypeNormal, "LeftSelector", msg)
	}
}

// finalize removes the operator's annotations from the pods the exporter
// injected, says in an Event that loaded agents stay loaded, and lets the
// exporter go.
func (r *Reconciler) finalize(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter) error {
	if !action.HasFinalizer(ex, Finalizer) {
		return nil
	}
	var pods corev1.PodList
	if err := r.read.List(ctx, ex.Namespace, &pods, query.FromWatch(WatchPods)); err != nil {
		return err
	}
	cleared := 0
	for i := range pods.Items {
		if why, err := r.optedOut(ctx, &pods.Items[i]); why != "" || err != nil {
			continue // opted out: its annotations stay as they are
		}
		changed, err := clearAnnotations(ctx, r.opts.Client, &pods.Items[i], ex.Name)
		if err != nil {
			return err
		}
		if changed {
			cleared++
		}
	}
	rec := sdk.EventRecorderFrom(ctx)
	rec.Eventf(ex, corev1.EventTypeNormal, "Finalized",
		"removed the operator's annotations from %d pods; agents already loaded keep running until their containers restart (a java agent cannot be unloaded from a running JVM)", cleared)
	if _, err := action.RemoveFinalizer(ctx, nil, ex, Finalizer); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	r.metrics.forgetExporter(ex.Namespace, ex.Name)
	r.conditions.forget(ex.Namespace, ex.Name)
	r.forgetEvictions(ex.Namespace + "/" + ex.Name)
	r.pacer.forget(ex.Namespace + "/" + ex.Name)
	return nil
}

// plan is what one look at an exporter found.
type plan struct {
	spec jmxv1alpha1.PrometheusJmxExporterSpec
	// verdict is whether the exporter may act now (verdict.go), as the look
	// found it: judge changes it for what the pods show.
	verdict
	matched   []*corev1.Pod
	conflicts map[string][]string // other exporter -> pods
	pods      map[string]podState // pod name -> state
	// canaryRunning: the exporter's canary job ran when the pods were read.
	canaryRunning bool
	failures      []string // "pod/container: Reason: message"
	pending       []string
	endpoints     []jmxv1alpha1.MetricsEndpoint
	// endpointIndex holds the keys of endpoints[:indexed] (hasEndpoint).
	endpointIndex map[endpointKey]bool
	indexed       int
	portPending   []string
	jobs          []*job
	retryIn       time.Duration
	strategyErr   string
	// departed are pods that carry this exporter's record but that its
	// selector no longer matches: they lose the operator's annotations.
	departed []*corev1.Pod
	// ownAnnotations are "pod (keys)" of injected pods that keep their own
	// prometheus.io annotations, where the operator set none.
	ownAnnotations []string

	// waitingJVM are the "pod/container" found without a JVM that are
	// looked at again for one that starts late (latejvm.go).
	waitingJVM []string

	// breaker is the circuit breaker to write (judge).
	breaker *jmxv1alpha1.CircuitBreaker
	// rejectedConfig is a new verdict of an agent on the current config.
	rejectedConfig *jmxv1alpha1.RejectedConfig
	// deaths are JVMs that ended during or soon after a load under the
	// current generation and config.
	deaths []jmxv1alpha1.CircuitBreaker
	// landedAt is the latest load under the current generation and config
	// that has not yet run for the breaker window (verdict.proven says
	// whether one has).
	landedAt time.Time
	// atStartDeaths are the deaths of JVMs given the agent at start, by
	// "pod/container" (observeAtStart): their last output is read for the
	// breaker's message.
	atStartDeaths map[string]atStartDeath
	// atStartClaimed is true while a pod being created tries the change at
	// start (status.atStartCanary holds, claimed by the webhook): attach
	// waits for its outcome.
	atStartClaimed bool
	// attachClaim is the stored status.atStartCanary when the leader
	// claimed it for its attach canary (mode Both, attachedPod set) and it
	// still holds; attachTrying is true while that canary's try lasts (its
	// job queued, running or retried, or its load not yet run for the
	// breaker window). See claimForAttach.
	attachClaim  *jmxv1alpha1.AtStartCanary
	attachTrying bool
	// trying are the pods whose current start had an attempt under the
	// current generation and config fail transiently within the window.
	trying map[string]bool
	// held says why jobs wait (the change is being tried on one container).
	held string
	// stale, refused and notes describe the agents' configs for
	// ConfigApplied: "pod/container" still on an earlier config, "pod/
	// container: Reason: message" that refused the current one, and the
	// agents' notes on it.
	stale, refused, notes []string

	// Start-time injection (atstart.go). atStartPods counts the pods given
	// the agent at start; atStartStale are their "pod/container" whose
	// agents serve an earlier config, and atStartPortPending the pods given
	// an earlier port (both until the pod is next created); recordJobs write
	// the operator's record on such pods (nothing runs in them).
	atStartPods        int
	atStartStale       []string
	atStartPortPending []string
	recordJobs         []*job
	// atStartNotes say what is odd about pods given the agent at start.
	atStartNotes []string
	// atStartDeliveries are those pods' deliveries (delivery.go).
	atStartDeliveries deliveries
	// notAtStart are the "pod/container" that mode AtStart leaves without
	// the agent (never attached).
	notAtStart []string
	// notAtStartWhy are what the webhook said of those pods it left alone
	// (atstart.AnnotationNotes), one "pod <name> (<notes>)" each.
	notAtStartWhy []string
	// webhookErr says why no pod gets the agent at start although the mode
	// asks for it (the operator runs without its webhook).
	webhookErr string
	// attachRefused are the "pod/container" whose JVM refuses a live attach
	// under mode Both (reason AttachRefused), refusedPods their pods.
	attachRefused []string
	refusedPods   []*corev1.Pod
	// terminating are the pods the selector matches that are being
	// deleted; restartNote says what restartOnRefusal is doing (evict.go).
	terminating []*corev1.Pod
	restartNote string
	// restartStopped, when set, is why restartOnRefusal stopped
	// (status.restartOnRefusal.stopped): Degraded says it.
	restartStopped string
	// podsRead is true once the exporter's pods were read: what the plan
	// says about pods (and their absence) is then true.
	podsRead bool
	// optOut is what the plan found of the owners' opt-out (optout.go).
	optOut optOutPlan
}

type podState = string

// defaulted fills in the operator's defaults. The agent's paths are always
// the operator's own, whatever the exporter says (checkAgent refuses an
// exporter that asks for others).
func (r *Reconciler) defaulted(spec jmxv1alpha1.PrometheusJmxExporterSpec) jmxv1alpha1.PrometheusJmxExporterSpec {
	if spec.Injection.Strategy == "" {
		spec.Injection.Strategy = r.opts.DefaultStrategy
	}
	agent := jmxv1alpha1.Agent{}
	if spec.Agent != nil {
		agent.Image = spec.Agent.Image
	}
	if agent.Image == "" {
		agent.Image = r.opts.AgentImage
	}
	agent.Path, agent.AttachHelperPath = r.opts.AgentPath, r.opts.AttachHelperPath
	spec.Agent = &agent
	return spec.Defaulted()
}

// checkAgent says why the exporter's spec.agent is refused (reason and
// message), or "" when it is acceptable: its image is the operator's own or
// on the allowlist, and its paths are empty or the operator's own. Whoever
// may create an exporter must not decide what runs in other people's pods.
func (r *Reconciler) checkAgent(a *jmxv1alpha1.Agent) (reason, msg string) {
	if a == nil {
		return "", ""
	}
	if a.Image != "" && !r.imageAllowed(a.Image) {
		return jmxv1alpha1.ReasonAgentImageNotAllowed, fmt.Sprintf(
			"spec.agent.image %q is not an agent image this operator runs (allowed: %s); nothing was run in any pod: "+
				"leave spec.agent.image empty, or have an administrator add the exact reference to the operator's --allowed-agent-images (env ALLOWED_AGENT_IMAGES)",
			a.Image, strings.Join(r.allowedImages(), ", "))
	}
	for _, f := range []struct{ field, got, own, flag string }{
		{"spec.agent.path", a.Path, r.opts.AgentPath, "--agent-path"},
		{"spec.agent.attachHelperPath", a.AttachHelperPath, r.opts.AttachHelperPath, "--attach-helper-path"},
	} {
		if f.got != "" && f.got != f.own {
			return jmxv1alpha1.ReasonAgentPathNotAllowed, fmt.Sprintf(
				"%s %q differs from the operator's own %q: the paths in the agent image are fixed by the operator (its %s flag), not by exporters; nothing was run in any pod: "+
					"remove %s (it is deprecated and must be empty or equal the operator's own)",
				f.field, f.got, f.own, f.flag, f.field)
		}
	}
	return "", ""
}

// imageAllowed says whether image is the operator's agent image or on its
// allowlist (exact references).
func (r *Reconciler) imageAllowed(image string) bool {
	for _, a := range r.allowedImages() {
		if a == image {
			return true
		}
	}
	return false
}

// allowedImages is the operator's agent image, then its allowlist.
func (r *Reconciler) allowedImages() []string {
	out := []string{r.opts.AgentImage}
	for _, a := range r.opts.AllowedAgentImages {
		if a = strings.TrimSpace(a); a != "" && a != r.opts.AgentImage {
			out = appendOnce(out, a)
		}
	}
	return out
}

func (r *Reconciler) plan(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter) *plan {
	p := &plan{spec: r.defaulted(ex.Spec), conflicts: map[string][]string{}, pods: map[string]podState{}}
	log := sdk.LoggerFrom(ctx)
	sel, err := metav1.LabelSelectorAsSelector(p.spec.Selector)
	if err == nil && (p.spec.Selector == nil || sel.Empty()) {
		err = fmt.Errorf("the selector is empty and would match every pod")
	}
	if err != nil {
		p.configValid = condition(jmxv1alpha1.ConditionConfigValid, false, jmxv1alpha1.ReasonInvalidSelector,
			"spec.selector: "+err.Error()+"; set matchLabels or matchExpressions that select the JVM pods")
		return p
	}
	p.verdict = r.verdictOf(ctx, ex, p.spec)
	strategy, ok := r.strategies[p.spec.Injection.Strategy]
	if !ok && attachAllowed(p.spec) {
		p.strategyErr = fmt.Sprintf("spec.injection.strategy %s is not enabled in this operator (its --strategies flag, env STRATEGIES, enables %s); no pod was touched: "+
			"use %s, or have an administrator enable %s (the flag and its RBAC)",
			p.spec.Injection.Strategy, strings.Join(r.strategyNames(), ", "), strings.Join(r.strategyNames(), " or "), p.spec.Injection.Strategy)
	}
	if atStartMode(p.spec) && r.opts.NoWebhook {
		p.webhookErr = fmt.Sprintf("spec.injection.mode is %s, but this operator runs without its admission webhook (--webhook=off, env WEBHOOK, "+
			"or its RBAC for the webhook is missing: the operator's log at start names the grant): no pod gets the agent at start", p.spec.Injection.Mode)
		if p.spec.Injection.Mode == jmxv1alpha1.InjectionModeBoth {
			p.webhookErr += "; new pods are attached like running ones"
		}
		if p.spec.Injection.RestartOnRefusal {
			p.webhookErr += "; restartOnRefusal evicts nothing (a recreated pod would come back without the agent)"
		}
		p.webhookErr += "; have an administrator turn the webhook on, or use mode Attach"
	}

	// Whether the canary still runs is read before the pods: a canary that
	// ends later, while this plan is made, may have written its verdict
	// after the pods were read (see gate).
	p.canaryRunning = r.canaryRunning(ex.Namespace + "/" + ex.Name)
	var pods corev1.PodList
	if err := r.read.List(ctx, ex.Namespace, &pods, query.WithLabelSelector(sel.String()), query.FromWatch(WatchPods)); err != nil {
		log.Warnf("operator: list pods of %s/%s: %v", ex.Namespace, ex.Name, err)
		p.retryIn = 5 * time.Second
		return p
	}
	p.podsRead = true
	exporters, err := r.selectors.of(ctx, r.read, ex.Namespace)
	if err != nil {
		log.Warnf("operator: list exporters in %s: %v", ex.Namespace, err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if r.skipOptedOut(ctx, p, pod) {
			continue
		}
		if pod.DeletionTimestamp != nil {
			p.terminating = append(p.terminating, pod)
			continue
		}
		p.matched = append(p.matched, pod)
		if owner := ownerOf(pod, exporters); owner != nil && owner.uid != ex.UID {
			p.conflicts[owner.name] = append(p.conflicts[owner.name], pod.Name)
			p.pods[pod.Name] = podConflict
			continue
		}
		r.observe(p, pod)
		r.planPod(ctx, ex, p, pod, p.mayAct() && p.strategyErr == "", strategy)
	}
	p.departed = r.departed(ctx, ex, sel)
	if r.beforeGate != nil {
		r.beforeGate(ex.Namespace + "/" + ex.Name)
	}
	r.judge(ctx, ex, p)
	r.claimedAtStart(ex, p)
	if !p.mayAct() || p.strategyErr != "" {
		p.jobs = nil
	} else {
		r.gate(ex.Namespace+"/"+ex.Name, p)
	}
	ownPods(p.jobs)
	ownPods(p.recordJobs)
	return p
}

// ownPods gives each job a Pod of its own, with only what a job reads of
// it before it runs and while it runs without the cache's copy: the pod's
// identity (name, namespace, UID, for the strategies, the records and the
// Events), and its containers' names and security contexts (whom
// jmx-attach runs as). A job is planned with a pointer into the plan's list
// of pods: a job queued in the pool would keep the whole list alive, every
// pod the plan read, until it runs (issue 28: 9.2 GiB at 7,500 pods), and a
// copy of the whole pod keeps its labels, annotations and statuses (about
// half of the live heap with 10,000 jobs queued). A job reads everything
// else from the pod cache when it starts (stillNeeded).
func ownPods(jobs []*job) {
	for _, j := range jobs {
		j.pod = jobPod(j.pod)
	}
}

// jobPod is the part of pod a job keeps (ownPods), and what TrimPod keeps
// of the pod's identity and spec. A hostNetwork pod's IP is kept too: it is
// the address its agent binds (inject.AgentHost).
func jobPod(pod *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{TypeMeta: pod.TypeMeta}
	out.Name, out.Namespace, out.UID, out.ResourceVersion = pod.Name, pod.Namespace, pod.UID, pod.ResourceVersion
	if pod.Spec.HostNetwork {
		out.Spec.HostNetwork, out.Status.PodIP = true, pod.Status.PodIP
	}
	if sc := pod.Spec.SecurityContext; sc != nil {
		out.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: sc.RunAsUser, RunAsGroup: sc.RunAsGroup}
	}
	out.Spec.Containers = make([]corev1.Container, len(pod.Spec.Containers))
	for i, c := range pod.Spec.Containers {
		out.Spec.Containers[i] = corev1.Container{Name: c.Name, SecurityContext: c.SecurityContext}
	}
	return out
}

// rejectedCondition is ConfigValid=False for a config an agent refused.
func rejectedCondition(rc *jmxv1alpha1.RejectedConfig) metav1.Condition {
	return condition(jmxv1alpha1.ConditionConfigValid, false, jmxv1alpha1.ReasonConfigInvalid, fmt.Sprintf(
		"the agent in pod %s container %s refused the config: %s; no other JVM is given it (the JVM carries on without the agent); fix the config",
		rc.Pod, rc.Container, rc.Message))
}

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
	now := time.Now()
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
		// A JVM that ended during a load, or soon after one.
		if key && c.Failure != nil && c.Failure.Reason == jmxv1alpha1.ReasonJVMEnded {
			msg := "the JVM ended while its agent was being loaded: " + c.Failure.Message
			if term := terminationOf(cs, c.ContainerID); term != nil {
				msg += "; the container's last state: " + describeTermination(term)
			}
			p.deaths = append(p.deaths, jmxv1alpha1.CircuitBreaker{Pod: pod.Name, Container: cs.Name, ContainerID: c.ContainerID, Message: msg})
		} else if at, what := touchedAt(c); key && at != nil {
			if term := terminationOf(cs, c.ContainerID); term != nil && !stoppedOnRequest(term) &&
				term.FinishedAt.Sub(at.Time) <= window {
				after := term.FinishedAt.Sub(at.Time).Round(time.Second)
				if after < 0 {
					after = 0
				}
				p.deaths = append(p.deaths, jmxv1alpha1.CircuitBreaker{Pod: pod.Name, Container: cs.Name, ContainerID: c.ContainerID,
					Message: fmt.Sprintf("the JVM ended %s after %s; the container's last state: %s", after, what, describeTermination(term))})
			}
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
		switch {
		case c.ConfigHash == p.configHash:
			if c.Note != "" {
				p.notes = append(p.notes, where+": "+c.Note)
			}
			if c.Generation == p.generation {
				// Records keep whole seconds: the window counts from the
				// end of the second of the load.
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
			Message: truncateMsg(msg, 4000), RejectedAt: metav1.Now()}
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
		// port the application found taken).
		b.Message += "; " + r.lastOutput(ctx, ex.Namespace, b.Pod, b.Container, out.previous)
	}
	b.Generation, b.ConfigSHA256, b.OpenedAt = p.generation, p.configSHA, metav1.Now()
	b.Message = truncateMsg(b.Message, 4000)
	p.breaker, p.breakerOpen = &b, true
}

// gate lets a change through one container at a time: until a JVM has run
// the exporter's current generation and config for the breaker window, at
// most one job (of one container) runs, and none while a load under them is
// younger than the window. A config that kills a JVM, or that the agent
// refuses, so reaches one container, not every one.
func (r *Reconciler) gate(exporter string, p *plan) {
	if p.proven {
		return
	}
	p.attachTrying = r.attachTrying(exporter, p)
	if !p.landedAt.IsZero() {
		// The look that finds the load run for the window writes
		// status.proven (and drops the attach claim): it must come even
		// when nothing else is left to do.
		p.retryIn = minPositive(p.retryIn, max(time.Until(p.landedAt.Add(r.opts.BreakerWindow))+time.Second, time.Second))
	}
	if len(p.jobs) == 0 {
		return
	}
	if p.atStartClaimed {
		// A pod being created tries the change at start: its outcome
		// decides for the attached ones too.
		p.held = "the change is being tried on one pod, given the agent at its start, first"
		p.retryIn = minPositive(p.retryIn, 10*time.Second)
		p.jobs = nil
		return
	}
	if !p.landedAt.IsZero() {
		wait := time.Until(p.landedAt.Add(r.opts.BreakerWindow)) + time.Second
		p.held = fmt.Sprintf("the change is being tried on one container until %s", p.landedAt.Add(r.opts.BreakerWindow).UTC().Format(time.RFC3339))
		p.retryIn = minPositive(p.retryIn, max(wait, time.Second))
		p.jobs = nil
		return
	}
	if len(p.trying) > 0 {
		// Only the pod whose attempt failed is tried again, on its backoff.
		p.held = "the change is being tried on one container first"
		var keep []*job
		for _, j := range p.jobs {
			if p.trying[j.pod.Name] && len(keep) == 0 {
				j.tasks, j.canary = j.tasks[:1], true
				keep = append(keep, j)
			}
		}
		p.jobs = keep
		p.retryIn = minPositive(p.retryIn, r.opts.BreakerWindow)
		return
	}
	r.canaryMu.Lock()
	defer r.canaryMu.Unlock()
	if c, ok := r.canary[exporter]; ok {
		switch {
		case p.canaryRunning || r.pool.Busy(c.uid):
			p.held = "the change is being tried on one container first"
			p.jobs = nil
			return // the job wakes the exporter when it ends
		case c.unconfirmed && time.Now().Before(c.heldUntil) && p.hasPod(c.uid):
			// The canary's outcome is not known: only its pod is tried,
			// when its backoff allows.
			p.held = "the change is being tried on one container first"
			var keep []*job
			for _, j := range p.jobs {
				if string(j.pod.UID) == c.uid {
					j.tasks, j.canary = j.tasks[:1], true
					keep = append(keep, j)
				}
			}
			p.jobs = keep
			p.retryIn = minPositive(p.retryIn, max(time.Until(c.heldUntil), time.Second))
			return
		}
		delete(r.canary, exporter)
	}
	sort.Slice(p.jobs, func(i, j int) bool { return p.jobs[i].pod.Name < p.jobs[j].pod.Name })
	first := p.jobs[0]
	first.tasks = first.tasks[:1]
	first.canary = true
	p.jobs = p.jobs[:1]
	p.held = "the change is being tried on one container first"
	p.attachTrying = true
}

// canaryJob is an exporter's job that tries a change first.
type canaryJob struct {
	uid, pod string
	// unconfirmed is set when the job ended without the pod cache showing
	// its outcome: its record could not be written, or the cache lagged.
	// Until heldUntil, no other pod is given the change: the canary's pod
	// alone is tried again, once its backoff allows.
	unconfirmed bool
	heldUntil   time.Time
}

func (r *Reconciler) setCanary(exporter string, c canaryJob) {
	r.canaryMu.Lock()
	defer r.canaryMu.Unlock()
	r.canary[exporter] = c
}

// clearCanary forgets exporter's canary when it is the job of pod uid.
func (r *Reconciler) clearCanary(exporter, uid string) {
	r.canaryMu.Lock()
	defer r.canaryMu.Unlock()
	if r.canary[exporter].uid == uid {
		delete(r.canary, exporter)
	}
}

// attachTrying says whether exporter's attach canary still tries the
// change: its job queued or running, a pod's failed attempt retried, an
// outcome the cache has not shown yet, or a load not yet run for the
// breaker window.
func (r *Reconciler) attachTrying(exporter string, p *plan) bool {
	if p.canaryRunning || len(p.trying) > 0 || !p.landedAt.IsZero() {
		return true
	}
	r.canaryMu.Lock()
	defer r.canaryMu.Unlock()
	c, ok := r.canary[exporter]
	return ok && (r.pool.Busy(c.uid) || c.unconfirmed && time.Now().Before(c.heldUntil) && p.hasPod(c.uid))
}

// canaryRunning says whether exporter's canary job is queued or running.
func (r *Reconciler) canaryRunning(exporter string) bool {
	r.canaryMu.Lock()
	defer r.canaryMu.Unlock()
	c, ok := r.canary[exporter]
	return ok && r.pool.Busy(c.uid)
}

// canaryEnded records how j, a canary, ended: confirmed when the pod cache
// shows every record it wrote (or it had nothing left to do), so that the
// next plan sees its outcome.
func (r *Reconciler) canaryEnded(j *job, confirmed bool) {
	r.canaryMu.Lock()
	defer r.canaryMu.Unlock()
	c, ok := r.canary[j.exporter]
	if !ok || c.uid != string(j.pod.UID) {
		return
	}
	if confirmed {
		c.unconfirmed, c.heldUntil = false, time.Time{}
	} else {
		// Long enough for the pod's first backoffs and the cache to catch
		// up; a pod that cannot be tried again within it gives way.
		c.unconfirmed, c.heldUntil = true, time.Now().Add(max(r.opts.BreakerWindow, canaryHold))
	}
	r.canary[j.exporter] = c
}

// canaryHold is the shortest time a canary whose outcome is unknown holds
// its exporter's change back from the other pods.
const canaryHold = time.Minute

// hasPod says whether the plan matched the pod with uid.
func (p *plan) hasPod(uid string) bool {
	for _, pod := range p.matched {
		if string(pod.UID) == uid {
			return true
		}
	}
	return false
}

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

// hasEndpoint says whether the plan lists an endpoint of pod on port. It
// indexes the endpoints appended since its last call, so that a plan of n
// pods costs O(n), not O(n²) (10,000 pods: 50 million comparisons).
func (p *plan) hasEndpoint(pod string, port int32) bool {
	if p.endpointIndex == nil {
		p.endpointIndex = map[endpointKey]bool{}
	}
	for _, e := range p.endpoints[p.indexed:] {
		p.endpointIndex[endpointKey{e.Pod, e.Port}] = true
	}
	p.indexed = len(p.endpoints)
	return p.endpointIndex[endpointKey{pod, port}]
}

// endpointKey is the key of status.metricsEndpoints.
type endpointKey struct {
	pod  string
	port int32
}

// departed returns the pods that carry ex's record although its selector no
// longer matches them (their labels changed, or the selector did): the
// operator's annotations on them go. They are found among the pods that
// carry ex's record (indexRecordedBy), not among every pod of the
// namespace: a namespace of a thousand exporters of ten pods each decoded
// its 10,000 pods at every look at each.
func (r *Reconciler) departed(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, sel labels.Selector) []*corev1.Pod {
	// Chosen by metadata before anything is decoded: of the exporter's
	// recorded pods (all of its pods, most of the time), usually none left.
	leftSelector := query.WhereMeta(func(m metav1.Object) bool {
		_, ok := m.GetAnnotations()[AnnotationAgents]
		return ok && m.GetDeletionTimestamp() == nil && !sel.Matches(labels.Set(m.GetLabels()))
	})
	var pods corev1.PodList
	if err := r.read.List(ctx, ex.Namespace, &pods, query.FromWatch(WatchPods), query.MatchingIndex(indexRecordedBy, ex.Name), leftSelector); err != nil {
		return nil
	}
	var out []*corev1.Pod
	for i := range pods.Items {
		pod := &pods.Items[i]
		if _, ok := pod.Annotations[AnnotationAgents]; !ok || pod.DeletionTimestamp != nil || sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		if why, err := r.optedOut(ctx, pod); why != "" || err != nil {
			continue // its annotations stay as they are
		}
		if readRecord(pod).Exporter == ex.Name {
			out = append(out, pod)
		}
	}
	return out
}

func selectedContainer(names []string, name string) bool {
	if len(names) == 0 {
		return true
	}
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// worse orders pod states: failed > not injected at start > pending >
// injected.
func worse(a, b podState) podState {
	rank := map[podState]int{podInjected: 0, podPending: 1, podNotAtStart: 2, podFailed: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 || b < a {
		return b
	}
	return a
}

func derefTime(t *metav1.Time) metav1.Time {
	if t == nil {
		return metav1.Time{}
	}
	return *t
}

func (r *Reconciler) strategyNames() []string {
	var out []string
	for k := range r.strategies {
		out = append(out, string(k))
	}
	sort.Strings(out)
	return out
}

// loadConfig reads and validates the exporter's config. A bad config never
// reaches an agent: jmx_exporter calls System.exit on one.
func (r *Reconciler) loadConfig(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, spec jmxv1alpha1.PrometheusJmxExporterSpec) ([]byte, metav1.Condition) {
	if spec.Config == nil {
		return []byte(jmxv1alpha1.DefaultExporterConfig), condition(jmxv1alpha1.ConditionConfigValid, true,
			jmxv1alpha1.ReasonDefaultConfig, "spec.config is absent; the built-in config exports every MBean attribute")
	}
	name, key := spec.Config.ConfigMapName, spec.Config.ConfigMapKey
	cm, err := r.configMaps.get(ctx, ex.Namespace, name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, condition(jmxv1alpha1.ConditionConfigValid, false, jmxv1alpha1.ReasonConfigMapNotFound,
				fmt.Sprintf("ConfigMap %s not found in namespace %s; create it with the exporter config under key %q", name, ex.Namespace, key))
		}
		return nil, condition(jmxv1alpha1.ConditionConfigValid, false, jmxv1alpha1.ReasonConfigMapNotFound,
			fmt.Sprintf("reading ConfigMap %s: %v", name, err))
	}
	data, ok := cm.Data[key]
	if !ok {
		if b, ok := cm.BinaryData[key]; ok {
			data = string(b)
		} else {
			keys := make([]string, 0, len(cm.Data))
			for k := range cm.Data {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			return nil, condition(jmxv1alpha1.ConditionConfigValid, false, jmxv1alpha1.ReasonConfigKeyNotFound,
				fmt.Sprintf("ConfigMap %s has no key %q (it has %s); set spec.config.configMapKey or add the key", name, key, strings.Join(keys, ", ")))
		}
	}
	if err := jvm.ValidateExporterConfig([]byte(data)); err != nil {
		return nil, condition(jmxv1alpha1.ConditionConfigValid, false, jmxv1alpha1.ReasonConfigInvalid,
			fmt.Sprintf("ConfigMap %s key %q: %v; no agent was touched", name, key, err))
	}
	return []byte(data), condition(jmxv1alpha1.ConditionConfigValid, true, jmxv1alpha1.ReasonConfigLoaded,
		fmt.Sprintf("ConfigMap %s key %q", name, key))
}

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

// exportersOfPod maps a Pod event to the exporters whose selector matches the
// pod, and the exporter its record names (which must notice a pod that left
// its selection). It reads exporters from the cache.
func (r *Reconciler) exportersOfPod(ctx context.Context, obj runtime.Object) []string {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	r.pruneIfGone(ctx, pod)
	var keys []string
	if rec := readRecord(pod); rec.Exporter != "" {
		keys = append(keys, pod.Namespace+"/"+rec.Exporter)
	}
	exporters, err := r.selectors.of(ctx, r.read, pod.Namespace)
	if err != nil {
		return keys
	}
	for _, ref := range exporters {
		if ref.selector != nil && ref.selector.Matches(labels.Set(pod.Labels)) {
			keys = appendOnce(keys, ref.namespace+"/"+ref.name)
		}
	}
	return keys
}

// exportersOfConfigMap maps a ConfigMap event to the exporters that read it,
// through the exporters' index. The ConfigMaps watch holds metadata only,
// so obj is a *metav1.PartialObjectMetadata.
func (r *Reconciler) exportersOfConfigMap(ctx context.Context, obj runtime.Object) []string {
	cm, ok := obj.(metav1.Object)
	if !ok {
		return nil
	}
	var exporters jmxv1alpha1.PrometheusJmxExporterList
	if err := r.read.List(ctx, cm.GetNamespace(), &exporters, query.MatchingIndex(indexConfigMap, cm.GetName())); err != nil {
		return nil
	}
	if len(exporters.Items) == 0 {
		// No exporter reads it (any more): its data, if held, goes.
		r.configMaps.forget(cm.GetNamespace() + "/" + cm.GetName())
	}
	keys := make([]string, 0, len(exporters.Items))
	for _, ex := range exporters.Items {
		keys = append(keys, ex.Namespace+"/"+ex.Name)
	}
	return keys
}

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
	r.refusedMu.Lock()
	known, refusedBefore := r.refused[key]
	r.refusedMu.Unlock()
	if refusedBefore && known.fingerprint == fp {
		st = reducedStatus(st, known.message)
		keepTransitionTimes(st, old)
	}
	write, wait := r.pacer.due(key, changeOf(old, st), time.Now())
	if !write {
		return wait, nil
	}

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
	ex.Status = *st
	err := action.UpdateStatus(ctx, ex)
	if apierrors.IsInvalid(err) {
		// Sending the same status again gets the same answer: remember it,
		// say so, and write what the server accepts instead.
		msg := truncateMsg(err.Error(), 2000)
		r.refusedMu.Lock()
		r.refused[key] = refusal{fingerprint: fp, message: msg}
		r.refusedMu.Unlock()
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
				return 0, nil
			}
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

// retries remembers transient failures per container start, for backoff, by
// pod: a pod's entries go with the pod (pruneIfGone), and those of its
// containers' earlier starts at the next plan of the pod (keepOnly).
type retries struct {
	mu sync.Mutex
	m  map[string]map[string]retry // pod UID -> container/containerID -> retry
}

type retry struct {
	attempts int
	next     time.Time
}

func newRetries() *retries { return &retries{m: map[string]map[string]retry{}} }

func retryKey(pod *corev1.Pod, container, containerID string) string {
	return string(pod.UID) + "/" + container + "/" + containerID
}

// splitRetryKey splits a retryKey (or an evictKey, evict.go: every key
// starts with the pod's UID, so that pruneIfGone drops them all) into the
// pod's UID and the rest.
func splitRetryKey(key string) (string, string) {
	uid, rest, _ := strings.Cut(key, "/")
	return uid, rest
}

// wait is how long until key may be tried again (0: now).
func (r *retries) wait(key string) time.Duration {
	uid, rest := splitRetryKey(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	if d := time.Until(r.m[uid][rest].next); d > 0 {
		return d
	}
	return 0
}

// failed records a transient failure and returns the backoff: 2s doubling to
// 5m.
func (r *retries) failed(key string) time.Duration {
	uid, rest := splitRetryKey(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	pod := r.m[uid]
	if pod == nil {
		pod = map[string]retry{}
		r.m[uid] = pod
	}
	e := pod[rest]
	d := 2 * time.Second << min(e.attempts, 8)
	if d > 5*time.Minute {
		d = 5 * time.Minute
	}
	e.attempts++
	e.next = time.Now().Add(d)
	pod[rest] = e
	return d
}

func (r *retries) forget(key string) {
	uid, rest := splitRetryKey(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m[uid], rest)
	if len(r.m[uid]) == 0 {
		delete(r.m, uid)
	}
}

// hasPod says whether the pod with uid has entries.
func (r *retries) hasPod(uid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.m[uid]
	return ok
}

// forgetPod drops every entry of the pod with uid.
func (r *retries) forgetPod(uid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, uid)
}

// keepOnly drops the pod's entries of container starts other than the
// current ones (statuses): a restarted container's earlier start is never
// tried again. The pod's eviction backoff (evictKey) stays.
func (r *retries) keepOnly(pod *corev1.Pod, statuses []corev1.ContainerStatus) {
	uid := string(pod.UID)
	r.mu.Lock()
	defer r.mu.Unlock()
	entries, ok := r.m[uid]
	if !ok {
		return
	}
	current := make(map[string]bool, len(statuses))
	for _, cs := range statuses {
		_, rest := splitRetryKey(retryKey(pod, cs.Name, cs.ContainerID))
		current[rest] = true
	}
	for k := range entries {
		if !current[k] && k != evictRetry {
			delete(entries, k)
		}
	}
	if len(entries) == 0 {
		delete(r.m, uid)
	}
}

// pods is the number of pods with entries.
func (r *retries) pods() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}
