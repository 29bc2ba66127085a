package operator

// plan.go is the look at one exporter: the plan it fills (what the pods show
// and what to do), and the pods it reads, owns or lost.

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

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
	// obs is what the look gathered before planning: the clock, the
	// pool, the canary (observed.go).
	obs observed
	// dropCanary is the canary gate found no longer holding the change
	// back; plan forgets it (dropCanary).
	dropCanary *canaryJob
	failures   []string // "pod/container: Reason: message"
	pending    []string
	endpoints  []jmxv1alpha1.MetricsEndpoint
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
	// breakerOutput, when the breaker this look opened is a death at
	// start, says which log addLastOutput reads for its message.
	breakerOutput *atStartDeath
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
	p.obs = r.gather(ex.Namespace + "/" + ex.Name)
	p.canaryRunning = p.obs.canaryBusy
	var pods corev1.PodList
	if err := r.read.List(ctx, ex.Namespace, &pods, query.WithLabelSelector(sel.String()), query.FromWatch(watchPods)); err != nil {
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
		r.planPod(ctx, ex, p, pod, p.mayAttach(), strategy)
	}
	p.departed = r.departed(ctx, ex, sel)
	if r.beforeGate != nil {
		r.beforeGate(ex.Namespace + "/" + ex.Name)
	}
	r.judge(ctx, ex, p)
	r.claimedAtStart(ex, p)
	if !p.mayAttach() {
		p.jobs = nil
	} else {
		r.gateNow(ex.Namespace+"/"+ex.Name, p)
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

// jobPod is the part of pod a job keeps (ownPods), and what trimPod keeps
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

// hasPod says whether the plan matched the pod with uid.
func (p *plan) hasPod(uid string) bool {
	for _, pod := range p.matched {
		if string(pod.UID) == uid {
			return true
		}
	}
	return false
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
	if err := r.read.List(ctx, ex.Namespace, &pods, query.FromWatch(watchPods), query.MatchingIndex(indexRecordedBy, ex.Name), leftSelector); err != nil {
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

// mayAttach says whether the look may attach to or reconfigure JVMs: the
// exporter may act now (its verdict) and its strategy is enabled.
func (p *plan) mayAttach() bool { return p.mayAct() && p.strategyErr == "" }
