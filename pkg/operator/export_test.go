package operator

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
)

// SetBeforeGate makes r call f in each look at an exporter, between reading
// its pods and gating its jobs. Set it before the operator runs.
func SetBeforeGate(r *Reconciler, f func(exporter string)) { r.beforeGate = f }

// PodBusy says whether a job on the pod with uid is queued or running.
func PodBusy(r *Reconciler, uid string) bool { return r.pool.Busy(uid) }

// SetStatusDelay makes r wait d, instead of StatusDelay, before it writes a
// status change that may wait.
func SetStatusDelay(r *Reconciler, d time.Duration) {
	r.pacer.mu.Lock()
	defer r.pacer.mu.Unlock()
	r.pacer.delay = d
}

// StatusWaits says whether a change of the exporter's (namespace/name)
// status waits to be written.
func StatusWaits(r *Reconciler, exporter string) bool {
	waits := false
	r.pacer.paces().with(exporter, func(m *exporterMemory) { waits = !m.pace.since.IsZero() || m.pace.startsWait })
	return waits
}

// StatusOf is the status an operator with the default options computes
// for ex, whose spec.config must be absent, when its pod cache holds pods,
// all selected and none another exporter's: the counts, the bounded samples
// and the conditions. Nothing is injected and nothing is written.
func StatusOf(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, pods []*corev1.Pod) *jmxv1alpha1.PrometheusJmxExporterStatus {
	r := &Reconciler{opts: Options{}.withDefaults(), pool: inject.NewPool(1), retries: newRetries(),
		agentLines: newAgentLineReads()}
	p := &plan{spec: r.defaulted(ex.Spec), conflicts: map[string][]string{}, pods: map[string]podState{}, podsRead: true,
		obs: observed{now: time.Now(), busy: r.pool.Busy}}
	p.config, p.configValid = r.loadConfig(ctx, ex, p.spec)
	p.generation = ex.Generation
	p.configSHA, p.configHash = configHashes(p.config)
	for _, pod := range pods {
		p.matched = append(p.matched, pod)
		r.observe(p, pod)
		r.planPod(ctx, ex, p, pod, false, nil)
	}
	r.judge(ctx, ex, p)
	return r.status(ctx, ex, p, p.counts())
}

// WatchUnserved is the watch of the exporters in the namespaces the
// operator does not serve (watchUnserved), for the tests outside the
// package.
const WatchUnserved = watchUnserved
