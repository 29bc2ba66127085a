package leader

import (
	"errors"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// serviceAccountNamespaceFile is where a pod's mounted service account names its namespace.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// DefaultPodName returns the POD_NAME environment variable ("" outside a pod that sets it).
func DefaultPodName() string {
	return strings.TrimSpace(os.Getenv("POD_NAME"))
}

// DefaultNamespace returns POD_NAMESPACE, else the mounted service account's namespace, else "".
func DefaultNamespace() string {
	if ns := strings.TrimSpace(os.Getenv("POD_NAMESPACE")); ns != "" {
		return ns
	}
	b, err := os.ReadFile(serviceAccountNamespaceFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// revisionLabels are added per ReplicaSet, StatefulSet or DaemonSet revision, so two replicas of one operator
// can differ in them during a rollout; they must not decide who belongs to the operator.
var revisionLabels = []string{
	"pod-template-hash",
	"controller-revision-hash",
	"pod-template-generation",
	"statefulset.kubernetes.io/pod-name",
	"apps.kubernetes.io/pod-index",
}

// OperatorLabels returns the labels every replica of pod's operator shares: pod's own labels minus leaderKey and
// the per-revision labels. The result is empty when the pod carries no other labels.
func OperatorLabels(pod *corev1.Pod, leaderKey string) map[string]string {
	out := make(map[string]string, len(pod.Labels))
	for k, v := range pod.Labels {
		out[k] = v
	}
	delete(out, leaderKey)
	for _, k := range revisionLabels {
		delete(out, k)
	}
	return out
}

// isStaleOwner reports whether pod can no longer hold a leader-for-life lock: it has stopped for good.
func isStaleOwner(pod *corev1.Pod) (bool, string) {
	switch {
	case pod.Status.Reason == "Evicted":
		return true, "evicted"
	case pod.Status.Phase == corev1.PodFailed:
		return true, "failed"
	case pod.Status.Phase == corev1.PodSucceeded:
		return true, "succeeded"
	}
	return false, ""
}

func validationErrors(key, value string) error {
	var msgs []string
	msgs = append(msgs, validation.IsQualifiedName(key)...)
	msgs = append(msgs, validation.IsValidLabelValue(value)...)
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; "))
}

// selectorFor returns the selector of pod's operator, or nil when the pod has no labels to select on.
func selectorFor(pod *corev1.Pod, leaderKey string) labels.Selector {
	l := OperatorLabels(pod, leaderKey)
	if len(l) == 0 {
		return nil
	}
	return labels.SelectorFromSet(l)
}
