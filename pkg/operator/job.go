package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// job is the work on one pod: its containers one after another, so that
// their JVMs, which share the pod's network, get distinct ports.
type job struct {
	exporter     string // namespace/name
	exporterName string
	pod          *corev1.Pod
	spec         jmxv1alpha1.PrometheusJmxExporterSpec
	config       []byte
	configHash   string
	strategy     inject.Strategy
	tasks        []task
}

type task struct {
	container   corev1.ContainerStatus
	reconfigure bool
	previous    ContainerRecord
	hadRecord   bool
}

// outcome classes.
const (
	resultSuccess = "success"
	resultFailure = "failure" // permanent
	resultRetry   = "retry"   // transient
)

func (r *Reconciler) runJob(ctx context.Context, j *job) {
	defer func() {
		if err := r.op.Enqueue(WatchExporters, j.exporter); err != nil {
			r.op.Logger().Warnf("operator: wake exporter %s: %v", j.exporter, err)
		}
	}()
	inUse := portsInUse(j.pod)
	for _, t := range j.tasks {
		if ctx.Err() != nil {
			return
		}
		if t.reconfigure {
			r.reconfigure(ctx, j, t)
		} else {
			r.inject(ctx, j, t, inUse)
		}
	}
}

func (r *Reconciler) target(j *job, cs corev1.ContainerStatus) inject.Target {
	t := inject.Target{Pod: j.pod, Container: cs.Name, ContainerID: cs.ContainerID}
	for _, c := range j.pod.Spec.Containers {
		if c.Name == cs.Name {
			t.Capabilities = inject.ContainerCapabilities(c.SecurityContext)
		}
	}
	if cs.User != nil && cs.User.Linux != nil {
		t.UID, t.GID = ptrTo(cs.User.Linux.UID), ptrTo(cs.User.Linux.GID)
		return t
	}
	var uid, gid *int64
	if psc := j.pod.Spec.SecurityContext; psc != nil {
		uid, gid = psc.RunAsUser, psc.RunAsGroup
	}
	for _, c := range j.pod.Spec.Containers {
		if c.Name == cs.Name && c.SecurityContext != nil {
			if c.SecurityContext.RunAsUser != nil {
				uid = c.SecurityContext.RunAsUser
			}
			if c.SecurityContext.RunAsGroup != nil {
				gid = c.SecurityContext.RunAsGroup
			}
		}
	}
	t.UID, t.GID = uid, gid
	return t
}

func (r *Reconciler) request(j *job, cs corev1.ContainerStatus, port int32) inject.Request {
	wait := 5 * time.Second
	if cs.State.Running != nil {
		if left := r.opts.JVMWait - time.Since(cs.State.Running.StartedAt.Time); left > wait {
			wait = left
		}
	}
	if limit := r.opts.InjectionTimeout - 15*time.Second; wait > limit && limit > 0 {
		wait = limit
	}
	return inject.Request{
		Port: port, Config: j.config, JVMs: j.spec.JVMs, Wait: wait.Round(time.Second),
		Image: j.spec.Agent.Image, AgentPath: j.spec.Agent.Path, AttachHelperPath: j.spec.Agent.AttachHelperPath,
		PullPolicy: r.opts.PullPolicy,
	}
}

// portsInUse is, per container, the ports of the agents its current start
// has, from the pod's record.
func portsInUse(pod *corev1.Pod) map[string][]int32 {
	out := map[string][]int32{}
	rec := readRecord(pod)
	for _, cs := range pod.Status.ContainerStatuses {
		if c, ok := rec.current(cs.Name, cs.ContainerID); ok {
			for _, j := range c.JVMs {
				out[cs.Name] = append(out[cs.Name], j.Port)
			}
		}
	}
	return out
}

// basePort is the first port the container's JVMs may take: want, or the
// next one above the ports the pod's other containers' agents took.
func basePort(inUse map[string][]int32, container string, want int32) int32 {
	used := map[int32]bool{}
	for c, ports := range inUse {
		if c == container {
			continue
		}
		for _, p := range ports {
			used[p] = true
		}
	}
	p := want
	for used[p] && p < 65535 {
		p++
	}
	return p
}

func (r *Reconciler) inject(ctx context.Context, j *job, t task, inUse map[string][]int32) {
	cs := t.container
	key := retryKey(j.pod, cs.Name, cs.ContainerID)
	target := r.target(j, cs)
	req := r.request(j, cs, basePort(inUse, cs.Name, j.spec.Port))
	log := r.op.Logger().WithField("pod", j.pod.Namespace+"/"+j.pod.Name).WithField("container", cs.Name).
		WithField("strategy", j.strategy.Name())
	start := time.Now()
	tctx, cancel := context.WithTimeout(ctx, r.opts.InjectionTimeout)
	out, err := j.strategy.Inject(tctx, target, req)
	cancel()
	took := time.Since(start)
	if ctx.Err() != nil {
		return // shutting down or leadership lost: the next leader picks it up
	}
	rec := classify(out, err)
	exporterRef := r.exporterRef(j)
	switch rec.class {
	case resultRetry:
		backoff := r.retries.failed(key)
		if errors.Is(err, inject.ErrTooManyAttempts) {
			rec.class = resultFailure
			rec.failure = &Failure{Reason: "TooManyAttempts", Message: err.Error()}
			break
		}
		r.metrics.observe(j.strategy.Name(), resultRetry, rec.reason, took)
		msg := fmt.Sprintf("injecting %s failed, retrying in %s: %s", target, backoff.Round(time.Second), rec.message)
		log.Warn("operator: " + msg)
		r.event(j.pod, exporterRef, corev1.EventTypeWarning, "InjectionRetry", msg)
		return
	}
	r.retries.forget(key)
	now := metav1.Now()
	err = updateRecord(ctx, r.opts.Client, j.pod.Namespace, j.pod.Name, j.pod.UID, func(pr *PodRecord) {
		pr.Exporter = j.exporterName
		c := ContainerRecord{ContainerID: cs.ContainerID, Port: j.spec.Port, ConfigHash: j.configHash,
			JVMs: rec.jvms, NoJVM: rec.noJVM, Failure: rec.failure}
		if len(rec.jvms) > 0 {
			c.InjectedAt = &now
		}
		pr.Containers[cs.Name] = c
	})
	if err != nil {
		r.retries.failed(key)
		log.Warnf("operator: record the injection of %s: %v", target, err)
		return
	}
	r.written.add(key)
	for _, jr := range rec.jvms {
		inUse[cs.Name] = append(inUse[cs.Name], jr.Port)
	}
	r.metrics.observe(j.strategy.Name(), rec.class, rec.reason, took)
	switch {
	case rec.failure != nil:
		msg := fmt.Sprintf("%s: %s: %s", target, rec.failure.Reason, rec.failure.Message)
		if len(rec.jvms) > 0 {
			msg += fmt.Sprintf(" (%d other JVMs got the agent)", len(rec.jvms))
		}
		log.Error("operator: injection failed: " + msg)
		r.event(j.pod, exporterRef, corev1.EventTypeWarning, rec.failure.Reason, "injection failed: "+msg)
	case rec.noJVM:
		log.Info("operator: no JVM in " + target.String())
		r.event(j.pod, exporterRef, corev1.EventTypeNormal, jmxv1alpha1.ReasonNoJVMFound,
			fmt.Sprintf("no JVM found in %s within %s; the container is left alone", target, req.Wait))
	default:
		var ports []string
		for _, jr := range rec.jvms {
			ports = append(ports, fmt.Sprintf("%s on port %d", jr.Main, jr.Port))
		}
		msg := fmt.Sprintf("loaded the JMX exporter agent into %s: %s (%s, %s)", target, strings.Join(ports, ", "),
			j.strategy.Name(), took.Round(time.Millisecond))
		log.Info("operator: " + msg)
		r.event(j.pod, exporterRef, corev1.EventTypeNormal, "Injected", msg)
	}
}

func (r *Reconciler) reconfigure(ctx context.Context, j *job, t task) {
	cs := t.container
	key := retryKey(j.pod, cs.Name, cs.ContainerID)
	target := r.target(j, cs)
	req := r.request(j, cs, t.previous.Port)
	start := time.Now()
	tctx, cancel := context.WithTimeout(ctx, r.opts.InjectionTimeout)
	out, err := j.strategy.Reconfigure(tctx, target, req)
	cancel()
	if ctx.Err() != nil {
		return
	}
	took := time.Since(start)
	if err == nil {
		for _, res := range out.Results {
			// A JVM that never got the agent (a second JVM that was refused,
			// or started later) has nothing to reconfigure.
			if res.Status == jvm.OutcomeError && res.Reason != jvm.ReasonNotInjected {
				err = fmt.Errorf("JVM %d (%s): %s: %s", res.NSPID, res.MainClass, res.Reason, res.Message)
				break
			}
		}
		if len(out.Results) == 0 {
			err = fmt.Errorf("no result: %s", out.Detail)
		}
	}
	exporterRef := r.exporterRef(j)
	if err != nil {
		backoff := r.retries.failed(key)
		r.metrics.observe(j.strategy.Name()+"/reconfigure", resultRetry, "ReconfigureFailed", took)
		msg := fmt.Sprintf("giving %s the new config failed, retrying in %s: %v", target, backoff.Round(time.Second), err)
		r.op.Logger().Warn("operator: " + msg)
		r.event(j.pod, exporterRef, corev1.EventTypeWarning, "ReconfigureRetry", msg)
		return
	}
	r.retries.forget(key)
	if err := updateRecord(ctx, r.opts.Client, j.pod.Namespace, j.pod.Name, j.pod.UID, func(pr *PodRecord) {
		if c, ok := pr.Containers[cs.Name]; ok && c.ContainerID == cs.ContainerID {
			c.ConfigHash = j.configHash
			pr.Containers[cs.Name] = c
		}
	}); err != nil {
		r.retries.failed(key)
		return
	}
	r.written.add(reconfigureKey(key, j.configHash))
	r.metrics.observe(j.strategy.Name()+"/reconfigure", resultSuccess, "", took)
	r.event(j.pod, exporterRef, corev1.EventTypeNormal, "Reconfigured",
		fmt.Sprintf("wrote the new exporter config into %s; the running agents reload it on their next scrape", target))
}

// exporterRef is enough of the exporter for an Event.
func (r *Reconciler) exporterRef(j *job) *jmxv1alpha1.PrometheusJmxExporter {
	ns, name, _ := strings.Cut(j.exporter, "/")
	var ex jmxv1alpha1.PrometheusJmxExporter
	ex.Namespace, ex.Name = ns, name
	if err := r.read.Get(context.Background(), &ex); err != nil {
		ex.Namespace, ex.Name = ns, name
	}
	ex.APIVersion, ex.Kind = jmxv1alpha1.SchemeGroupVersion.String(), "PrometheusJmxExporter"
	return &ex
}

// event records an Event on the pod and on the exporter.
func (r *Reconciler) event(pod *corev1.Pod, ex *jmxv1alpha1.PrometheusJmxExporter, typ, reason, msg string) {
	rec := r.op.EventRecorder()
	ref := pod.DeepCopy()
	ref.APIVersion, ref.Kind = "v1", "Pod"
	rec.Event(ref, typ, reason, msg)
	rec.Event(ex, typ, reason, msg)
}

// classified is one container's outcome.
type classified struct {
	class   string
	reason  string
	message string
	jvms    []JVMRecord
	noJVM   bool
	failure *Failure
}

// classify sorts an outcome into success, a permanent failure (never retried
// on this container start) or a transient one (retried with backoff).
func classify(out inject.Outcome, err error) classified {
	if err != nil {
		return classified{class: resultRetry, reason: "Unknown", message: err.Error()}
	}
	if out.NoJVM {
		return classified{class: resultSuccess, reason: jmxv1alpha1.ReasonNoJVMFound, noJVM: true}
	}
	if out.Refused != "" {
		return classified{class: resultFailure, reason: out.Refused, failure: &Failure{Reason: out.Refused, Message: out.Detail}}
	}
	if len(out.Results) == 0 {
		return classified{class: resultFailure, reason: "InvalidRequest",
			failure: &Failure{Reason: "InvalidRequest", Message: "jmx-attach refused the request: " + out.Detail}}
	}
	c := classified{class: resultSuccess}
	var transient []string
	for _, res := range out.Results {
		if res.OK() {
			jr := JVMRecord{PID: res.NSPID, Main: res.MainClass, Port: int32(res.Port)}
			if jr.PID == 0 {
				jr.PID = res.PID
			}
			if st := startedAt(res); st != nil {
				jr.StartedAt = st
			}
			c.jvms = append(c.jvms, jr)
			continue
		}
		reason, permanent := failureReason(res.Reason)
		msg := fmt.Sprintf("JVM %d (%s): %s", res.NSPID, res.MainClass, res.Message)
		if !permanent {
			transient = append(transient, reason+": "+msg)
			continue
		}
		if c.failure == nil {
			c.failure = &Failure{Reason: reason, Message: msg}
		}
	}
	switch {
	case len(transient) > 0:
		return classified{class: resultRetry, reason: strings.SplitN(transient[0], ":", 2)[0], message: strings.Join(transient, "; ")}
	case c.failure != nil:
		c.class, c.reason = resultFailure, c.failure.Reason
	}
	return c
}

// failureReason maps a jmx-attach reason to a CamelCase reason and says
// whether it is permanent for the container start.
func failureReason(r jvm.Reason) (string, bool) {
	switch r {
	case jvm.ReasonAttachDisabled:
		return jmxv1alpha1.ReasonAttachDisabled, true
	case jvm.ReasonDynamicLoadingDisabled:
		return jmxv1alpha1.ReasonDynamicLoadingDisabled, true
	case jvm.ReasonPortInUse:
		return jmxv1alpha1.ReasonPortInUse, true
	case jvm.ReasonAgentStartFailed:
		return jmxv1alpha1.ReasonAgentStartFailed, true
	}
	name := camel(string(r))
	switch string(r) {
	case "process-gone", "too-young", "attach-timeout", "connect-failed", "http-check-failed", "copy-failed", "internal", "truncated", "":
		return name, false
	}
	// not-jvm, sigquit-not-handled, agent-jar-invalid, config-invalid,
	// port-not-permitted, port-check-failed, args-too-long, agent-load-failed,
	// agent-not-listening, invalid-request, lock-failed and anything new:
	// retrying would fail the same way or risk the JVM.
	return name, true
}

// camel turns "port-not-permitted" into "PortNotPermitted".
func camel(s string) string {
	if s == "" {
		return "Unknown"
	}
	var b strings.Builder
	for _, part := range strings.Split(s, "-") {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// event reason for sdk's recorder needs the object to have a kind; Pod refs
// are built in event().
var _ sdk.Handler = (*Reconciler)(nil)

// startedAt is the JVM's start time from its result, when jmx-attach knew it.
func startedAt(res jvm.InjectResult) *metav1.Time {
	if res.StartedAt.IsZero() {
		return nil
	}
	t := metav1.NewTime(res.StartedAt)
	return &t
}
