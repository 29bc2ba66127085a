package workload

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
)

// Parallel is how many requests the load generator keeps in flight. More
// only queue inside the API server on a two-core machine.
const Parallel = 16

// Writer is the load generator: it writes the benchmark's objects with
// clients of its own, outside any contender.
type Writer struct {
	Kube kubernetes.Interface
	JMX  versioned.Interface
}

// CreateConfigMap creates the ConfigMap the exporters in ns read.
func (w Writer) CreateConfigMap(ctx context.Context, ns string) error {
	_, err := w.Kube.CoreV1().ConfigMaps(ns).Create(ctx, ConfigMap(ns), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("workload: create config map: %w", err)
	}
	return nil
}

// CreateExporters creates exporters 0..n-1 in ns.
func (w Writer) CreateExporters(ctx context.Context, ns string, n int) error {
	return ForEach(ctx, n, Parallel, func(ctx context.Context, i int) error {
		_, err := w.JMX.JmxV1alpha1().PrometheusJmxExporters(ns).Create(ctx, Exporter(ns, i), metav1.CreateOptions{FieldManager: "bench-writer"})
		if err != nil {
			return fmt.Errorf("workload: create exporter %d: %w", i, err)
		}
		return nil
	})
}

// UpdateExporters sets spec.port of exporters 0..n-1 in ns, which bumps
// their generation.
func (w Writer) UpdateExporters(ctx context.Context, ns string, n int, port int32) error {
	patch := fmt.Appendf(nil, `{"spec":{"port":%d}}`, port)
	return ForEach(ctx, n, Parallel, func(ctx context.Context, i int) error {
		_, err := w.JMX.JmxV1alpha1().PrometheusJmxExporters(ns).Patch(ctx, ExporterName(i), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "bench-writer"})
		if err != nil {
			return fmt.Errorf("workload: update exporter %d: %w", i, err)
		}
		return nil
	})
}

// DeleteExporters deletes every exporter in ns in one request.
func (w Writer) DeleteExporters(ctx context.Context, ns string) error {
	if err := w.JMX.JmxV1alpha1().PrometheusJmxExporters(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("workload: delete exporters in %s: %w", ns, err)
	}
	return nil
}

// SettleStatuses writes the desired status (DesiredStatus) on every
// exporter in ns whose status is not up to date, so that each contender
// starts on the same state: nothing left to do.
func (w Writer) SettleStatuses(ctx context.Context, ns string) error {
	cm, err := w.Kube.CoreV1().ConfigMaps(ns).Get(ctx, ConfigMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("workload: get config map: %w", err)
	}
	list, err := w.JMX.JmxV1alpha1().PrometheusJmxExporters(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("workload: list exporters: %w", err)
	}
	var stale []*jmxv1alpha1.PrometheusJmxExporter
	for i := range list.Items {
		e := &list.Items[i]
		if status, changed := DesiredStatus(e, cm); changed {
			e.Status = status
			stale = append(stale, e)
		}
	}
	return ForEach(ctx, len(stale), Parallel, func(ctx context.Context, i int) error {
		_, err := w.JMX.JmxV1alpha1().PrometheusJmxExporters(ns).UpdateStatus(ctx, stale[i], metav1.UpdateOptions{})
		if err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("workload: settle status of %s: %w", stale[i].Name, err)
		}
		return nil
	})
}

// CreatePods creates Pods 0..n-1 in ns and reports them Running through the
// status subresource, as a kubelet would, so that their managedFields hold
// the two writers a real Pod has.
func (w Writer) CreatePods(ctx context.Context, ns string, n int) error {
	return ForEach(ctx, n, Parallel, func(ctx context.Context, i int) error {
		pods := w.Kube.CoreV1().Pods(ns)
		pod, err := pods.Create(ctx, Pod(ns, i), metav1.CreateOptions{FieldManager: "kube-controller-manager"})
		if err != nil {
			return fmt.Errorf("workload: create pod %d: %w", i, err)
		}
		pod.Status = RunningStatus(pod, i)
		if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{FieldManager: "kubelet"}); err != nil {
			return fmt.Errorf("workload: pod %d status: %w", i, err)
		}
		return nil
	})
}

// CountPods returns how many Pods ns holds.
func (w Writer) CountPods(ctx context.Context, ns string) (int, error) {
	list, err := w.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("workload: list pods: %w", err)
	}
	return len(list.Items), nil
}

// Namespace creates a namespace named prefix plus a random suffix.
func (w Writer) Namespace(ctx context.Context, prefix string) (string, error) {
	ns, err := w.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("workload: create namespace: %w", err)
	}
	return ns.Name, nil
}

// WarmupName is an exporter outside the numbered set, created before a
// measurement to show that a contender is handling events.
const WarmupName = "pje-warmup"

// CreateWarmup creates the warm-up exporter in ns.
func (w Writer) CreateWarmup(ctx context.Context, ns string) error {
	e := Exporter(ns, 0)
	e.Name = WarmupName
	if _, err := w.JMX.JmxV1alpha1().PrometheusJmxExporters(ns).Create(ctx, e, metav1.CreateOptions{FieldManager: "bench-writer"}); err != nil {
		return fmt.Errorf("workload: create warm-up exporter: %w", err)
	}
	return nil
}
