package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
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
	pool       *inject.Pool
	metrics    *metrics
	retries    *retries
	strategies map[jmxv1alpha1.InjectionStrategy]inject.Strategy
	// podMonitors is true when the operator keeps a PodMonitor per
	// exporter: the cluster serves the kind and Options did not disable it.
	podMonitors bool
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
		return nil
	}
	if ex.DeletionTimestamp != nil {
		return r.finalize(ctx, ex)
	}
	if _, err := action.AddFinalizer(ctx, nil, ex, Finalizer); err != nil {
		return fmt.Errorf("add finalizer: %w", err)
	}
	plan := r.plan(ctx, ex)
	for _, job := range plan.jobs {
		job := job
		r.pool.TryRun(ctx, string(job.pod.UID), func(ctx context.Context) { r.runJob(ctx, job) })
	}
	pmErr := r.ensurePodMonitor(ctx, ex, plan)
	if err := r.writeStatus(ctx, ex, plan); err != nil {
		return err
	}
	if pmErr != nil {
		return pmErr
	}
	if plan.retryIn > 0 {
		return sdk.RequeueAfter(plan.retryIn)
	}
	return nil
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
	return nil
}

// plan is what one look at an exporter found.
type plan struct {
	spec        jmxv1alpha1.PrometheusJmxExporterSpec
	configValid metav1.Condition
	config      []byte
	configHash  string
	matched     []*corev1.Pod
	conflicts   map[string][]string // other exporter -> pods
	pods        map[string]podState // pod name -> state
	failures    []string            // "pod/container: Reason: message"
	pending     []string
	endpoints   []jmxv1alpha1.MetricsEndpoint
	portPending []string
	jobs        []*job
	retryIn     time.Duration
	strategyErr string
}

type podState = string

func (r *Reconciler) defaulted(spec jmxv1alpha1.PrometheusJmxExporterSpec) jmxv1alpha1.PrometheusJmxExporterSpec {
	if spec.Injection.Strategy == "" {
		spec.Injection.Strategy = r.opts.DefaultStrategy
	}
	if spec.Agent == nil {
		spec.Agent = &jmxv1alpha1.Agent{}
	}
	if spec.Agent.Image == "" {
		spec.Agent.Image = r.opts.AgentImage
	}
	if spec.Agent.Path == "" {
		spec.Agent.Path = r.opts.AgentPath
	}
	if spec.Agent.AttachHelperPath == "" {
		spec.Agent.AttachHelperPath = r.opts.AttachHelperPath
	}
	return spec.Defaulted()
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
	p.config, p.configValid = r.loadConfig(ctx, ex, p.spec)
	valid := p.configValid.Status == metav1.ConditionTrue
	if valid {
		sum := sha256.Sum256(p.config)
		p.configHash = hex.EncodeToString(sum[:])[:16]
	}
	strategy, ok := r.strategies[p.spec.Injection.Strategy]
	if !ok {
		p.strategyErr = fmt.Sprintf("injection strategy %s is disabled in this operator (its --strategies flag); use one of %s",
			p.spec.Injection.Strategy, strings.Join(r.strategyNames(), ", "))
	}

	var pods corev1.PodList
	if err := r.read.List(ctx, ex.Namespace, &pods, query.WithLabelSelector(sel.String()), query.FromWatch(WatchPods)); err != nil {
		log.Warnf("operator: list pods of %s/%s: %v", ex.Namespace, ex.Name, err)
		p.retryIn = 5 * time.Second
		return p
	}
	var exporters jmxv1alpha1.PrometheusJmxExporterList
	if err := r.read.List(ctx, ex.Namespace, &exporters); err != nil {
		log.Warnf("operator: list exporters in %s: %v", ex.Namespace, err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		p.matched = append(p.matched, pod)
		if owner := ownerOf(pod, exporters.Items); owner != nil && owner.UID != ex.UID {
			p.conflicts[owner.Name] = append(p.conflicts[owner.Name], pod.Name)
			p.pods[pod.Name] = podConflict
			continue
		}
		r.planPod(ctx, ex, p, pod, valid && p.strategyErr == "", strategy)
	}
	return p
}

// ownerOf returns the exporter that injects pod: of all exporters whose
// selector matches it, the oldest (then the first by name).
func ownerOf(pod *corev1.Pod, exporters []jmxv1alpha1.PrometheusJmxExporter) *jmxv1alpha1.PrometheusJmxExporter {
	var owner *jmxv1alpha1.PrometheusJmxExporter
	for i := range exporters {
		ex := &exporters[i]
		if ex.DeletionTimestamp != nil || ex.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(ex.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		if owner == nil || ex.CreationTimestamp.Before(&owner.CreationTimestamp) ||
			ex.CreationTimestamp.Equal(&owner.CreationTimestamp) && ex.Name < owner.Name {
			owner = ex
		}
	}
	return owner
}

// planPod works out, for one pod the exporter owns, what each selected
// container's current start needs, and queues a job when something does.
func (r *Reconciler) planPod(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, p *plan, pod *corev1.Pod, canInject bool, strategy inject.Strategy) {
	rec := readRecord(pod)
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		p.pods[pod.Name] = podPending
		p.pending = append(p.pending, pod.Name+" (not running)")
		return
	}
	j := &job{exporter: ex.Namespace + "/" + ex.Name, exporterName: ex.Name, pod: pod, spec: p.spec,
		config: p.config, configHash: p.configHash, strategy: strategy}
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
		switch {
		case ok && c.Failure != nil:
			state = worse(state, podFailed)
			p.failures = append(p.failures, fmt.Sprintf("%s/%s: %s: %s", pod.Name, cs.Name, c.Failure.Reason, c.Failure.Message))
		case ok && c.NoJVM:
			noJVM++
		case ok:
			jvms += len(c.JVMs)
			for _, jr := range c.JVMs {
				p.endpoints = append(p.endpoints, jmxv1alpha1.MetricsEndpoint{
					Pod: pod.Name, Container: cs.Name, JVM: jr.Main, PID: int32(jr.PID), JVMStartedAt: jr.StartedAt,
					PodIP: pod.Status.PodIP, Port: jr.Port, ContainerID: cs.ContainerID, InjectedAt: derefTime(c.InjectedAt),
				})
			}
			if c.Port != 0 && c.Port != p.spec.Port {
				p.portPending = appendOnce(p.portPending, pod.Name)
			}
			if canInject && c.ConfigHash != p.configHash && len(c.JVMs) > 0 {
				if wait := r.retries.wait(key); wait > 0 {
					p.retryIn = minPositive(p.retryIn, wait)
				} else {
					j.tasks = append(j.tasks, task{container: cs, reconfigure: true, previous: c})
				}
			}
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
			j.tasks = append(j.tasks, task{container: cs, previous: c, hadRecord: ok})
		}
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

// worse orders pod states: failed > pending > injected.
func worse(a, b podState) podState {
	rank := map[podState]int{podInjected: 0, podPending: 1, podFailed: 2}
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
	var cm corev1.ConfigMap
	cm.Namespace, cm.Name = ex.Namespace, name
	if err := r.read.Get(ctx, &cm); err != nil {
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
	var keys []string
	if rec := readRecord(pod); rec.Exporter != "" {
		keys = append(keys, pod.Namespace+"/"+rec.Exporter)
	}
	var exporters jmxv1alpha1.PrometheusJmxExporterList
	if err := r.read.List(ctx, pod.Namespace, &exporters); err != nil {
		return keys
	}
	for i := range exporters.Items {
		ex := &exporters.Items[i]
		if ex.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(ex.Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) {
			keys = appendOnce(keys, ex.Namespace+"/"+ex.Name)
		}
	}
	return keys
}

// exportersOfConfigMap maps a ConfigMap event to the exporters that read it,
// through the exporters' index.
func (r *Reconciler) exportersOfConfigMap(ctx context.Context, obj runtime.Object) []string {
	cm, ok := obj.(metav1.Object)
	if !ok {
		return nil
	}
	var exporters jmxv1alpha1.PrometheusJmxExporterList
	if err := r.read.List(ctx, cm.GetNamespace(), &exporters, query.MatchingIndex(indexConfigMap, cm.GetName())); err != nil {
		return nil
	}
	keys := make([]string, 0, len(exporters.Items))
	for _, ex := range exporters.Items {
		keys = append(keys, ex.Namespace+"/"+ex.Name)
	}
	return keys
}

// writeStatus computes the status from the plan and writes it through the
// status subresource when it changed; it records an Event when a condition
// turns bad.
func (r *Reconciler) writeStatus(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, p *plan) error {
	counts := map[string]int{}
	for _, s := range p.pods {
		counts[string(s)]++
	}
	r.metrics.setExporter(ex.Namespace, ex.Name, len(p.endpoints), counts)
	old := ex.Status.DeepCopy()
	st := ex.Status.DeepCopy()
	st.ObservedGeneration = ex.Generation
	st.MatchedPods = int32(len(p.matched))
	st.InjectedPods = int32(counts[podInjected])
	st.FailedPods = int32(counts[podFailed])
	sort.Slice(p.endpoints, func(i, j int) bool {
		a, b := p.endpoints[i], p.endpoints[j]
		return a.Pod < b.Pod || a.Pod == b.Pod && a.Port < b.Port
	})
	st.MetricsEndpoints = p.endpoints
	sort.Strings(p.portPending)
	st.PortPendingPods = p.portPending

	setCondition(st, p.configValid)
	setCondition(st, r.readyCondition(p, counts))
	setCondition(st, r.degradedCondition(p))

	rec := sdk.EventRecorderFrom(ctx)
	for _, c := range st.Conditions {
		bad := c.Type == jmxv1alpha1.ConditionDegraded && c.Status == metav1.ConditionTrue ||
			c.Type == jmxv1alpha1.ConditionConfigValid && c.Status == metav1.ConditionFalse ||
			c.Type == jmxv1alpha1.ConditionReady && (c.Reason == jmxv1alpha1.ReasonNoPodsMatched || c.Reason == jmxv1alpha1.ReasonNoJVMFound)
		if !bad {
			continue
		}
		if prev := findCondition(old.Conditions, c.Type); prev == nil || prev.Status != c.Status || prev.Reason != c.Reason || prev.Message != c.Message {
			rec.Event(ex, corev1.EventTypeWarning, c.Reason, c.Message)
			sdk.LoggerFrom(ctx).Warnf("operator: %s/%s: %s=%s %s: %s", ex.Namespace, ex.Name, c.Type, c.Status, c.Reason, c.Message)
		}
	}
	if equality.Semantic.DeepEqual(old, st) {
		return nil
	}
	ex.Status = *st
	if err := action.UpdateStatus(ctx, ex); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return sdk.RequeueAfter(0)
		}
		return fmt.Errorf("update status: %w", err)
	}
	return nil
}

func (r *Reconciler) readyCondition(p *plan, counts map[string]int) metav1.Condition {
	ready := func(ok bool, reason, msg string) metav1.Condition {
		return condition(jmxv1alpha1.ConditionReady, ok, reason, msg)
	}
	switch {
	case p.configValid.Status != metav1.ConditionTrue:
		return ready(false, p.configValid.Reason, "the config is not valid: "+p.configValid.Message)
	case p.strategyErr != "":
		return ready(false, jmxv1alpha1.ReasonInjectionFailed, p.strategyErr)
	case len(p.matched) == 0:
		return ready(false, jmxv1alpha1.ReasonNoPodsMatched,
			"spec.selector matches no pod in this namespace; check the pods' labels")
	case counts[podFailed] > 0:
		return ready(false, jmxv1alpha1.ReasonInjectionFailed, limitList(p.failures, 10))
	case counts[podNoJVM] > 0 && counts[podNoJVM]+counts[podConflict] == len(p.matched):
		return ready(false, jmxv1alpha1.ReasonNoJVMFound, "no JVM runs in the selected containers of the matched pods")
	case counts[podPending] > 0:
		return ready(false, jmxv1alpha1.ReasonInjectionPending, "waiting for "+limitList(p.pending, 10))
	case counts[podInjected] == 0:
		return ready(false, jmxv1alpha1.ReasonInjectionPending, "no pod is injected yet")
	}
	return ready(true, jmxv1alpha1.ReasonAllInjected, fmt.Sprintf("%d JVMs in %d pods serve metrics", len(p.endpoints), counts[podInjected]))
}

func (r *Reconciler) degradedCondition(p *plan) metav1.Condition {
	deg := func(bad bool, reason, msg string) metav1.Condition {
		return condition(jmxv1alpha1.ConditionDegraded, bad, reason, msg)
	}
	switch {
	case len(p.failures) > 0:
		return deg(true, jmxv1alpha1.ReasonInjectionFailed, limitList(p.failures, 10))
	case p.strategyErr != "":
		return deg(true, jmxv1alpha1.ReasonInjectionFailed, p.strategyErr)
	case len(p.conflicts) > 0:
		var parts []string
		for other, pods := range p.conflicts {
			sort.Strings(pods)
			parts = append(parts, fmt.Sprintf("exporter %s, which is older, already selects pods %s", other, limitList(pods, 5)))
		}
		sort.Strings(parts)
		return deg(true, jmxv1alpha1.ReasonSelectorConflict, strings.Join(parts, "; ")+
			"; those pods are left to it: narrow this exporter's selector or remove the other one")
	case len(p.portPending) > 0:
		return deg(true, jmxv1alpha1.ReasonPortChangePending, fmt.Sprintf(
			"spec.port is %d, but the agents of pods %s still serve an earlier port: a loaded agent cannot change its port; the new one applies when each container restarts",
			p.spec.Port, limitList(p.portPending, 10)))
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

// retries remembers transient failures per container start, for backoff.
type retries struct {
	mu sync.Mutex
	m  map[string]retry
}

type retry struct {
	attempts int
	next     time.Time
}

func newRetries() *retries { return &retries{m: map[string]retry{}} }

func retryKey(pod *corev1.Pod, container, containerID string) string {
	return string(pod.UID) + "/" + container + "/" + containerID
}

// wait is how long until key may be tried again (0: now).
func (r *retries) wait(key string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d := time.Until(r.m[key].next); d > 0 {
		return d
	}
	return 0
}

// failed records a transient failure and returns the backoff: 2s doubling to
// 5m.
func (r *retries) failed(key string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.m[key]
	d := 2 * time.Second << min(e.attempts, 8)
	if d > 5*time.Minute {
		d = 5 * time.Minute
	}
	e.attempts++
	e.next = time.Now().Add(d)
	r.m[key] = e
	return d
}

func (r *retries) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, key)
}
