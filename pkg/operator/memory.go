package operator

// memory.go is where the Reconciler forgets what it keeps in memory: of an
// exporter once it is deleted or finalized (forgetExporter), and of a pod
// once it is gone (pruneIfGone). Every per-exporter and per-pod map is
// dropped from here.

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// pruneIfGone forgets the in-memory state of pod once the pod cache no
// longer has it (the pod was deleted, or replaced by one of the same name):
// every kind of retry key under its UID (its container starts' and its
// eviction's backoff), and what restartOnRefusal remembers of it. The pod watch's map function calls it for every pod event (the
// cache drops a deleted pod before its event is handed out), and every job
// when it ends, so whichever comes last prunes.
func (r *Reconciler) pruneIfGone(ctx context.Context, pod *corev1.Pod) {
	uid := string(pod.UID)
	if !r.retries.hasPod(uid) && !r.holdsPod(pod.UID) {
		return
	}
	var live corev1.Pod
	live.Namespace, live.Name = pod.Namespace, pod.Name
	err := r.read.Get(ctx, &live, query.FromWatch(watchPods))
	if apierrors.IsNotFound(err) || err == nil && string(live.UID) != uid {
		r.retries.forgetPod(uid)
		r.forgetPodEvictions(pod.UID)
	}
}

// forgetExporter drops everything the Reconciler keeps in memory of the
// exporter namespace/name: its entry of per-exporter memory (its canary
// job, the status the API server refused, restartOnRefusal's memory, the
// status pacer's pace; exportermemory.go), and what lives outside it (see
// exporterMemory): its metrics and condition series, which are
// unregistered. The exporter's deletion and its finalization both call it.
func (r *Reconciler) forgetExporter(namespace, name string) {
	key := namespace + "/" + name
	r.memory.forget(key)
	r.metrics.forgetExporter(namespace, name)
	r.conditions.forget(namespace, name)
}
