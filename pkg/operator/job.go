package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
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
	generation   int64
	strategy     inject.Strategy
	tasks        []task
	// written are the container records this job wrote, by container name.
	written map[string]ContainerRecord
	// canary is set on the one job that tries a change first.
	canary bool
}

type task struct {
	container   corev1.ContainerStatus
	reconfigure bool
	previous    ContainerRecord
	hadRecord   bool
	// retryFailure is set when previous is a permanent failure met with an
	// earlier generation or config, which is tried once more.
	retryFailure bool
	// atStart, when set, is the record to write for a container that got
	// the agent at start (planAtStart): nothing runs in the pod. Without a
	// verdict (no JVMs, no Failure), the agent's line is read first
	// (agentline.go), and atStartPort is its JVM's port.
	atStart     *ContainerRecord
	atStartPort int32
	// lateLook is set on a look again for a JVM in a container start where
	// none was found (previous has NoJVM; latejvm.go).
	lateLook bool
	// earlier is the container's record of an earlier start, when its
	// current start has none (a restart): it says whether the new start's
	// outcome is news (repeatsPreviousStart).
	earlier ContainerRecord
}

// outcome classes.
const (
	resultSuccess = "success"
	resultFailure = "failure" // permanent
	resultRetry   = "retry"   // transient
)

// wake looks at the exporter again, unless the operator is stopping.
func (r *Reconciler) wake(ctx context.Context, exporter string) {
	if ctx.Err() != nil {
		return // the next leader, or the next start, looks at every exporter
	}
	if err := r.op.Enqueue(watchExporters, exporter); err != nil {
		r.op.Logger().Warnf("operator: wake exporter %s: %v", exporter, err)
	}
}

// runJob does the job's tasks. A canary job then says whether the pod cache
// shows its outcome (see gate).
func (r *Reconciler) runJob(ctx context.Context, j *job) {
	j.written = map[string]ContainerRecord{}
	defer r.pruneIfGone(ctx, j.pod)
	fresh, ok := r.stillNeeded(ctx, j)
	if !ok {
		if j.canary {
			r.canaryEnded(j, true) // nothing was done
		}
		return
	}
	inUse := portsInUse(fresh)
	for _, t := range j.tasks {
		if ctx.Err() != nil {
			return
		}
		if t.atStart != nil {
			r.recordAtStart(ctx, j, t)
			continue
		}
		if t.reconfigure {
			r.reconfigure(ctx, j, t)
		} else {
			r.inject(ctx, j, t, inUse)
		}
	}
	// Waiting for the cache holds no slot of the pool (the pod's key stays
	// the job's until it returns).
	inject.Idle(ctx)
	shown := r.awaitCache(ctx, j)
	if j.canary {
		r.canaryEnded(j, shown && len(j.written) > 0)
	}
}

// stillNeeded drops the tasks that the pod's cached record shows done, and
// returns that pod, or false when nothing is left to do (or the pod is gone
// or replaced). A job is planned from the cache before it gets the pod's
// slot in the pool; an earlier job on the pod may have finished, and written
// its record, in between. Jobs free the slot only once the cache shows their
// records (awaitCache), so this look sees them.
func (r *Reconciler) stillNeeded(ctx context.Context, j *job) (*corev1.Pod, bool) {
	var pod corev1.Pod
	pod.Namespace, pod.Name = j.pod.Namespace, j.pod.Name
	if err := r.read.Get(ctx, &pod, query.FromWatch(watchPods)); err != nil {
		if !apierrors.IsNotFound(err) {
			// The cache is stopping (shutdown, leadership lost) or not
			// synced: the look that follows the job plans it again.
			r.op.Logger().Warnf("operator: read pod %s/%s from the cache: %v; its job is planned again", j.pod.Namespace, j.pod.Name, err)
		}
		return nil, false
	}
	if pod.UID != j.pod.UID {
		return nil, false
	}
	if why, err := r.optedOut(ctx, &pod); why != "" || err != nil {
		return nil, false // opted out since the job was planned
	}
	rec := readRecord(&pod)
	tasks := j.tasks[:0:0]
	for _, t := range j.tasks {
		c, ok := rec.current(t.container.Name, t.container.ContainerID)
		switch {
		case t.atStart != nil:
			if ok && rec.Exporter == j.exporterName && atStartVerdict(c, *t.atStart) {
				continue
			}
		case t.lateLook:
			if !ok || !c.NoJVM || c.Looks != t.previous.Looks || c.LooksEnded != "" {
				continue // looked at (or restarted) meanwhile
			}
		case !t.reconfigure && ok && c.settled() && !t.retryFailure:
			continue // injected (or found to have no JVM, or failed) meanwhile
		case !t.reconfigure && ok && t.retryFailure && c.Failure != nil && c.Generation == j.generation && c.ConfigHash == j.configHash:
			continue // tried again meanwhile
		case t.reconfigure && ok && (c.ConfigHash == j.configHash || c.Rejected != nil && c.Rejected.ConfigHash == j.configHash):
			continue
		}
		tasks = append(tasks, t)
	}
	j.tasks = tasks
	return &pod, len(tasks) > 0
}

// cacheWait bounds how long a job waits for the pod cache to show its
// records; the informer normally takes milliseconds.
const cacheWait = 10 * time.Second

// awaitCache waits until the pod cache shows the records the job wrote (or
// the pod is gone or replaced), at most cacheWait, and says whether it did.
// The job holds the pod's
// slot in the pool until then, so the next look at the exporter cannot plan
// from a cached pod that predates the record and inject or reconfigure the
// same container start again (which would add a second ephemeral container).
func (r *Reconciler) awaitCache(ctx context.Context, j *job) bool {
	if len(j.written) == 0 {
		return true
	}
	deadline := time.Now().Add(cacheWait)
	for ctx.Err() == nil {
		var pod corev1.Pod
		pod.Namespace, pod.Name = j.pod.Namespace, j.pod.Name
		err := r.read.Get(ctx, &pod, query.FromWatch(watchPods))
		if apierrors.IsNotFound(err) || err == nil && (pod.UID != j.pod.UID || showsRecords(&pod, j.written)) {
			return true
		}
		if time.Now().After(deadline) {
			r.op.Logger().Warnf("operator: the pod cache did not show the record of %s/%s within %s (%v)", j.pod.Namespace, j.pod.Name, cacheWait, err)
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

// showsRecords says whether pod's record has, for every container in
// written, the same container start with the same config.
func showsRecords(pod *corev1.Pod, written map[string]ContainerRecord) bool {
	rec := readRecord(pod)
	for name, w := range written {
		c, ok := rec.current(name, w.ContainerID)
		if !ok || c.ConfigHash != w.ConfigHash || c.Attempts != w.Attempts || c.Generation != w.Generation ||
			(c.Rejected == nil) != (w.Rejected == nil) || c.NoJVM != w.NoJVM || c.Looks != w.Looks || c.LooksEnded != w.LooksEnded ||
			(c.Reloads == nil) != (w.Reloads == nil) || c.Reloads != nil && *c.Reloads != *w.Reloads {
			return false
		}
	}
	return true
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

// inject loads the agent into the JVMs of the job's container t, or
// looks again for one (a late look), and records the outcome on the pod.
func (r *Reconciler) inject(ctx context.Context, j *job, t task, inUse map[string][]int32) {
	cs := t.container
	target := r.target(j, cs)
	req := r.request(j, cs, basePort(inUse, cs.Name, j.spec.Port))
	if t.lateLook {
		req.KeepBudget = lateLookBudgetKept
	}
	log := r.op.Logger().WithField("pod", j.pod.Namespace+"/"+j.pod.Name).WithField("container", cs.Name).
		WithField("strategy", j.strategy.Name())
	out, err, took, ok := r.call(ctx, func(ctx context.Context) (inject.Outcome, error) { return j.strategy.Inject(ctx, target, req) })
	if !ok {
		return // shutting down or leadership lost: the next leader picks it up
	}
	rec := classify(taskLoad, out, err)
	if t.lateLook && r.lateLookDone(ctx, j, t, out, err, rec, took) {
		return
	}
	if j.spec.Injection.Mode == jmxv1alpha1.InjectionModeBoth {
		rec = refusedUnderBoth(rec, j.spec.Injection.RestartOnRefusal)
	}
	if rec.class == resultRetry {
		var retried bool
		if rec, retried = r.injectRetry(ctx, j, t, rec, err, target, took, log); retried {
			return
		}
	}
	key := retryKey(j.pod, cs.Name, cs.ContainerID)
	r.retries.forget(key)
	c := r.injectedRecord(j, cs, rec)
	podRec, err := updateRecord(ctx, r.opts.Client, j.pod.Namespace, j.pod.Name, j.pod.UID, func(pr *PodRecord) {
		pr.Exporter = j.exporterName
		pr.Containers[cs.Name] = c
	})
	if err != nil {
		r.retries.failed(key)
		log.Warnf("operator: record the injection of %s: %v", target, err)
		return
	}
	j.written[cs.Name] = c
	for _, jr := range rec.jvms {
		inUse[cs.Name] = append(inUse[cs.Name], jr.Port)
	}
	r.metrics.observe(j.strategy.Name(), rec.class, rec.reason, took)
	r.injectedEvent(j, t, rec, c, podRec, target, req.Wait, took, log)
}

// call is one strategy call on a container, under Options.InjectionTimeout,
// and how long it took; ok is false when the operator is shutting down or
// lost its leadership. The strategy gave the pool's slot back while it
// waited; a wait cut short by the timeout may have left without one.
func (r *Reconciler) call(ctx context.Context, do func(context.Context) (inject.Outcome, error)) (out inject.Outcome, err error, took time.Duration, ok bool) {
	start := time.Now()
	tctx, cancel := context.WithTimeout(ctx, r.opts.InjectionTimeout)
	out, err = do(tctx)
	cancel()
	took = time.Since(start)
	if inject.Resume(ctx) != nil || ctx.Err() != nil {
		return out, err, took, false
	}
	return out, err, took, true
}

// injectRetry handles a load that failed transiently: within the bound of
// attempts (tooManyAttempts), it backs the container off, says so, and
// records the attempt on the pod, so that the bound holds for both
// strategies across operator restarts (retried true); past it, the outcome
// becomes the TooManyAttempts failure, recorded like any other.
func (r *Reconciler) injectRetry(ctx context.Context, j *job, t task, rec classified, err error, target inject.Target, took time.Duration,
	log logrus.FieldLogger) (classified, bool) {
	cs := t.container
	attempts := 0
	if p := t.previous; t.hadRecord && !p.settled() && p.Generation == j.generation && p.ConfigHash == j.configHash {
		attempts = p.Attempts
	}
	attempts++
	last := rec.reason + ": " + rec.message
	if f := tooManyAttempts(err, attempts, r.opts.MaxAttempts, last, t.previous.LastError); f != nil {
		return classified{class: resultFailure, reason: f.Reason, failure: f}, false
	}
	backoff := r.retries.failed(retryKey(j.pod, cs.Name, cs.ContainerID))
	r.metrics.observe(j.strategy.Name(), resultRetry, rec.reason, took)
	msg := fmt.Sprintf("injecting %s failed (attempt %d of %d), retrying in %s: %s", target, attempts, r.opts.MaxAttempts,
		backoff.Round(time.Second), rec.message)
	log.Warn("operator: " + msg)
	r.event(j.pod, r.exporterRef(j), corev1.EventTypeWarning, jmxv1alpha1.ReasonInjectionRetry, msg)
	now := metav1.Now()
	pending := ContainerRecord{ContainerID: cs.ContainerID, Port: j.spec.Port, ConfigHash: j.configHash,
		Generation: j.generation, Attempts: attempts, LastError: truncateMsg(last, 1024), AttemptedAt: &now}
	if _, err := updateRecord(ctx, r.opts.Client, j.pod.Namespace, j.pod.Name, j.pod.UID, func(pr *PodRecord) {
		pr.Exporter = j.exporterName
		pr.Containers[cs.Name] = pending
	}); err != nil {
		log.Warnf("operator: record the attempt on %s: %v", target, err)
		return rec, true
	}
	j.written[cs.Name] = pending
	return rec, true
}

// injectedRecord is the container's record of a load's outcome, rec.
func (r *Reconciler) injectedRecord(j *job, cs corev1.ContainerStatus, rec classified) ContainerRecord {
	c := ContainerRecord{ContainerID: cs.ContainerID, Port: j.spec.Port, ConfigHash: j.configHash, Generation: j.generation,
		JVMs: rec.jvms, NoJVM: rec.noJVM, Failure: rec.failure, Note: rec.note}
	if rec.noJVM {
		c = r.noJVMRecord(j, cs, 1, "")
	}
	if rec.rejected != "" {
		// The JVMs had an agent from an earlier load that kept its config.
		c.ConfigHash = ""
		c.Rejected = &Rejection{ConfigHash: j.configHash, Reason: jmxv1alpha1.ReasonConfigRejected, Message: rec.rejected}
	}
	if len(rec.jvms) > 0 {
		now := metav1.Now()
		c.InjectedAt = &now
	}
	return c
}

// injectedEvent says, in the log and in Events, what a load did: c is the
// record written, podRec the pod's record, wait how long the strategy
// waited for a JVM.
func (r *Reconciler) injectedEvent(j *job, t task, rec classified, c ContainerRecord, podRec PodRecord, target inject.Target, wait, took time.Duration,
	log logrus.FieldLogger) {
	exporterRef := r.exporterRef(j)
	others := ""
	if len(rec.jvms) > 0 {
		others = fmt.Sprintf(" (%d other JVMs got the agent)", len(rec.jvms))
	}
	switch {
	case rec.failure != nil && rec.failure.Reason == jmxv1alpha1.ReasonAttachRefused:
		msg := fmt.Sprintf("the JVM in %s refuses a live attach: %s", target, rec.failure.Message) + others
		log.Warn("operator: " + msg)
		r.event(j.pod, exporterRef, corev1.EventTypeWarning, jmxv1alpha1.ReasonAttachRefused, msg)
	case rec.failure != nil:
		msg := fmt.Sprintf("%s: %s: %s", target, rec.failure.Reason, rec.failure.Message) + others
		log.Error("operator: injection failed: " + msg)
		r.event(j.pod, exporterRef, corev1.EventTypeWarning, rec.failure.Reason, "injection failed: "+msg)
	case rec.noJVM:
		log.Info("operator: no JVM in " + target.String())
		msg := fmt.Sprintf("no JVM found in %s within %s", target, wait)
		if c.NextLookAt != nil {
			msg += fmt.Sprintf("; it is looked at again at %s for a JVM that starts late, and when it restarts", c.NextLookAt.UTC().Format(time.RFC3339))
		} else {
			msg += "; it is looked at again when it restarts"
		}
		r.event(j.pod, exporterRef, corev1.EventTypeNormal, jmxv1alpha1.ReasonNoJVMFound, msg)
	case rec.rejected != "":
		msg := fmt.Sprintf("the agent already in %s refused the current config and keeps its previous one: %s", target, rec.rejected)
		log.Warn("operator: " + msg)
		r.event(j.pod, exporterRef, corev1.EventTypeWarning, jmxv1alpha1.ReasonConfigRejected, msg)
	default:
		r.loadedEvent(j, t, rec, c, podRec, target, took, log, exporterRef)
	}
}

// loadedEvent says that a load gave the container's JVMs the agent: in the
// log, and in an Event on the pod (and on the exporter for a container's
// first start), unless the restarted container got what its previous start
// had.
func (r *Reconciler) loadedEvent(j *job, t task, rec classified, c ContainerRecord, podRec PodRecord, target inject.Target, took time.Duration,
	log logrus.FieldLogger, exporterRef *jmxv1alpha1.PrometheusJmxExporter) {
	cs := t.container
	var ports []string
	for _, jr := range rec.jvms {
		ports = append(ports, fmt.Sprintf("%s on port %d", jr.Main, jr.Port))
	}
	msg := fmt.Sprintf("loaded the JMX exporter agent into %s: %s (%s, %s)", target, strings.Join(ports, ", "),
		j.strategy.Name(), took.Round(time.Millisecond))
	if rec.note != "" {
		msg += "; note: " + rec.note
	}
	if note := keptNote(j.pod.Name, podRec); note != "" {
		msg += "; " + note
	}
	log.Info("operator: " + msg)
	if repeatsPreviousStart(cs, t, c) {
		// The restarted container got what its previous start had: the
		// record and the log line say so, an Event would say nothing new
		// (and would be the fourth write of the start).
		return
	}
	if cs.RestartCount > 0 {
		// A restarted container's agent is news for its pod, not for the
		// exporter.
		exporterRef = nil
	}
	r.event(j.pod, exporterRef, corev1.EventTypeNormal, jmxv1alpha1.ReasonInjected, msg)
}

// repeatsPreviousStart says whether c, the record of a restarted
// container's new start, repeats the record of its previous start
// (t.earlier): that start had the agent, loaded under the same generation
// and config, in as many JVMs with the same main classes and ports, and
// neither has a note.
func repeatsPreviousStart(cs corev1.ContainerStatus, t task, c ContainerRecord) bool {
	p := t.earlier
	switch {
	case cs.RestartCount == 0 || p.ContainerID == "" || p.ContainerID == cs.ContainerID,
		len(p.JVMs) == 0 || p.Failure != nil || p.Rejected != nil || p.Note != "" || c.Note != "",
		p.Generation != c.Generation || p.ConfigHash != c.ConfigHash || len(p.JVMs) != len(c.JVMs):
		return false
	}
	for i := range c.JVMs {
		if p.JVMs[i].Main != c.JVMs[i].Main || p.JVMs[i].Port != c.JVMs[i].Port {
			return false
		}
	}
	return true
}

// tooManyAttempts is the bound of transiently failed attempts on one
// container start, for loads and reloads alike: the TooManyAttempts failure
// when the strategy met its own bound (err is inject.ErrTooManyAttempts) or
// attempts, this one included, reached max; nil otherwise. last is this
// attempt's cause, previous the last cause recorded before it.
func tooManyAttempts(err error, attempts, max int, last, previous string) *Failure {
	switch {
	case errors.Is(err, inject.ErrTooManyAttempts):
		return &Failure{Reason: jmxv1alpha1.ReasonTooManyAttempts, Message: truncateMsg(err.Error()+lastCause(previous), 2048)}
	case attempts >= max:
		return &Failure{Reason: jmxv1alpha1.ReasonTooManyAttempts, Message: truncateMsg(fmt.Sprintf(
			"%d attempts on this container start failed; the last cause: %s; restart the container, or change the exporter, to try again", attempts, last), 2048)}
	}
	return nil
}

func lastCause(s string) string {
	if s == "" {
		return ""
	}
	return "; the last cause this operator saw: " + s
}

func truncateMsg(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// reconfigure gives the agents of the job's container t the current
// config, and records the outcome on the pod.
func (r *Reconciler) reconfigure(ctx context.Context, j *job, t task) {
	cs := t.container
	key := retryKey(j.pod, cs.Name, cs.ContainerID)
	target := r.target(j, cs)
	req := r.request(j, cs, t.previous.Port)
	out, err, took, ok := r.call(ctx, func(ctx context.Context) (inject.Outcome, error) { return j.strategy.Reconfigure(ctx, target, req) })
	if !ok {
		return
	}
	rec := classify(taskReload, out, err)
	var rejected *Rejection
	switch rec.class {
	case resultFailure:
		rejected = &Rejection{ConfigHash: j.configHash, Reason: rec.reason, Message: truncateMsg(rec.message, 2048)}
	case resultRetry:
		// Bounded as loads are (tooManyAttempts), counted in the pod's
		// record: past the bound the config is not offered again until it
		// changes or the container restarts.
		attempts, previous := t.previous.reloadAttempts(j.configHash)
		attempts++
		f := tooManyAttempts(rec.err, attempts, r.opts.MaxAttempts, rec.err.Error(), previous)
		if f == nil {
			r.reloadFailed(ctx, j, t, target, attempts, rec.err, took)
			return
		}
		rejected = &Rejection{ConfigHash: j.configHash, Reason: f.Reason, Message: f.Message}
	}
	r.retries.forget(key)
	now := metav1.Now()
	if err := r.updateContainer(ctx, j, cs, func(c *ContainerRecord) {
		if rejected != nil {
			c.Rejected = rejected
		} else {
			c.ConfigHash, c.Generation, c.ConfiguredAt, c.Note, c.Rejected = j.configHash, j.generation, &now, rec.note, nil
		}
		c.Reloads = nil
	}); err != nil {
		r.retries.failed(key)
		return
	}
	exporterRef := r.exporterRef(j)
	if rejected != nil {
		r.metrics.observe(j.strategy.Name()+"/reconfigure", resultFailure, rejected.Reason, took)
		msg := fmt.Sprintf("%s kept its previous config: %s: %s", target, rejected.Reason, rejected.Message)
		r.op.Logger().Warn("operator: " + msg)
		r.event(j.pod, exporterRef, corev1.EventTypeWarning, rejected.Reason, msg)
		return
	}
	r.metrics.observe(j.strategy.Name()+"/reconfigure", resultSuccess, "", took)
	msg := fmt.Sprintf("gave %s the new exporter config; its agents reloaded it", target)
	if rec.note != "" {
		msg += "; note: " + rec.note
	}
	r.event(j.pod, exporterRef, corev1.EventTypeNormal, jmxv1alpha1.ReasonReconfigured, msg)
}

// updateContainer changes the record of the job's container cs, when the
// pod's record still holds its current start, and notes what it wrote in
// the job (j.written).
func (r *Reconciler) updateContainer(ctx context.Context, j *job, cs corev1.ContainerStatus, change func(*ContainerRecord)) error {
	var written ContainerRecord
	applied := false
	if _, err := updateRecord(ctx, r.opts.Client, j.pod.Namespace, j.pod.Name, j.pod.UID, func(pr *PodRecord) {
		applied = false
		c, ok := pr.Containers[cs.Name]
		if !ok || c.ContainerID != cs.ContainerID {
			return
		}
		change(&c)
		pr.Containers[cs.Name] = c
		written, applied = c, true
	}); err != nil {
		return err
	}
	if applied {
		j.written[cs.Name] = written
	}
	return nil
}

// reloadFailed records a reload that failed transiently, attempt attempts
// of the bound, in the pod's record (so that the bound holds across
// operator restarts), and says so; the retry waits for the backoff.
func (r *Reconciler) reloadFailed(ctx context.Context, j *job, t task, target inject.Target, attempts int, err error, took time.Duration) {
	cs := t.container
	backoff := r.retries.failed(retryKey(j.pod, cs.Name, cs.ContainerID))
	r.metrics.observe(j.strategy.Name()+"/reconfigure", resultRetry, jmxv1alpha1.ReasonReconfigureFailed, took)
	msg := fmt.Sprintf("giving %s the new config failed (attempt %d of %d), retrying in %s: %v", target, attempts, r.opts.MaxAttempts,
		backoff.Round(time.Second), err)
	r.op.Logger().Warn("operator: " + msg)
	r.event(j.pod, r.exporterRef(j), corev1.EventTypeWarning, jmxv1alpha1.ReasonReconfigureRetry, msg)
	if err := r.updateContainer(ctx, j, cs, func(c *ContainerRecord) {
		c.Reloads = &ReloadAttempts{ConfigHash: j.configHash, Attempts: attempts, LastError: truncateMsg(err.Error(), 1024)}
	}); err != nil {
		r.op.Logger().Warnf("operator: record the reload attempt on %s: %v", target, err)
	}
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

// event records an Event on the pod and, unless ex is nil, on the exporter.
func (r *Reconciler) event(pod *corev1.Pod, ex *jmxv1alpha1.PrometheusJmxExporter, typ, reason, msg string) {
	rec := r.op.EventRecorder()
	ref := pod.DeepCopy()
	ref.APIVersion, ref.Kind = "v1", "Pod"
	rec.Event(ref, typ, reason, msg)
	if ex != nil {
		rec.Event(ex, typ, reason, msg)
	}
}
