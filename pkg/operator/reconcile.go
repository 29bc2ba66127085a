package operator

// reconcile.go is the exporters' handler: Handle looks at an exporter (plan),
// starts its jobs, acts on what the look found (evictions, departed pods, the
// PodMonitor) and writes its status; finalize lets a deleted exporter go.

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
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
	// memory is what the Reconciler remembers of each exporter: its
	// canary, its refused status, restartOnRefusal's memory
	// (exportermemory.go).
	memory exporterMemories
	// beforeGate, when set (by tests only), runs in plan between reading
	// the pods and gating the jobs.
	beforeGate func(exporter string)
	// podMonitors is true when the operator keeps a PodMonitor per
	// exporter: the cluster serves the kind and Options did not disable it.
	podMonitors bool
	// evictMu is held around a harmed pod's eviction; the pod watch takes
	// memory.mu only.
	evictMu sync.Mutex
	// harmed is replaceHarmed's memory per pod (evictMu guards it,
	// atstartbreaker.go).
	harmed map[types.UID]*harmedTry
	// pacer decides when a changed status is written (status.go); it
	// keeps the exporters' pace in memory.
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
		r.forgetExporter(ex.Namespace, ex.Name)
		return nil
	}
	if ex.DeletionTimestamp != nil {
		return r.finalize(ctx, ex)
	}
	if _, err := action.AddFinalizer(ctx, nil, ex, Finalizer); err != nil {
		return fmt.Errorf("add finalizer: %w", err)
	}
	plan := r.plan(ctx, ex)
	r.addLastOutput(ctx, ex, plan)
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
		rec.Event(ref, corev1.EventTypeNormal, jmxv1alpha1.ReasonLeftSelector, msg)
		rec.Event(ex, corev1.EventTypeNormal, jmxv1alpha1.ReasonLeftSelector, msg)
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
	if err := r.read.List(ctx, ex.Namespace, &pods, query.FromWatch(watchPods)); err != nil {
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
	rec.Eventf(ex, corev1.EventTypeNormal, jmxv1alpha1.ReasonFinalized,
		"removed the operator's annotations from %d pods; agents already loaded keep running until their containers restart (a java agent cannot be unloaded from a running JVM)", cleared)
	if _, err := action.RemoveFinalizer(ctx, nil, ex, Finalizer); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	r.forgetExporter(ex.Namespace, ex.Name)
	return nil
}
