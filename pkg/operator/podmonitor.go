package operator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
)

// watchPodMonitors names the watch of the operator's PodMonitors, which maps
// each event to the owning exporter, so that a PodMonitor edited or deleted
// by hand is put back.
const watchPodMonitors = "podmonitors"

// podMonitorGVK is the Prometheus Operator's PodMonitor kind. The operator
// keeps one per exporter when the cluster serves it (checked at Setup).
var podMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PodMonitor"}

// podMonitorResource is podMonitorGVK's resource, for discovery.
const podMonitorResource = "podmonitors"

// Labels on every PodMonitor the operator writes, besides
// Options.PodMonitorLabels.
const (
	// LabelManagedBy is app.kubernetes.io/managed-by: the operator's name.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelExporter names the exporter the PodMonitor scrapes for.
	LabelExporter = "jmx.handlerkit.dev/exporter"
)

// Prometheus' names for what pod discovery and the operator's annotations
// give a target (annotation names sanitized: every character that is not a
// letter, digit or underscore becomes an underscore).
const (
	metaAnnotation      = "__meta_kubernetes_pod_annotation_"
	metaExporter        = metaAnnotation + "jmx_handlerkit_dev_exporter"
	metaAnchor          = metaAnnotation + "jmx_handlerkit_dev_discovery_anchor"
	metaJVMPrefix       = metaAnnotation + "jmx_handlerkit_dev_jvm_"
	metaContainerName   = "__meta_kubernetes_pod_container_name"
	metaContainerPort   = "__meta_kubernetes_pod_container_port_number"
	metaContainerProto  = "__meta_kubernetes_pod_container_port_protocol"
	metaPodIP           = "__meta_kubernetes_pod_ip"
	tmpAnchor           = "__tmp_jmx_discovery_anchor"
	jvmAnnotationRegexp = `([^:]+):(\d+)`
)

// podMonitorsServed asks discovery whether monitoring.coreos.com/v1 serves
// podmonitors.
func podMonitorsServed(client kubernetes.Interface) (bool, error) {
	list, err := client.Discovery().ServerResourcesForGroupVersion(podMonitorGVK.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", podMonitorGVK.GroupVersion(), err)
	}
	for _, r := range list.APIResources {
		if r.Name == podMonitorResource {
			return true, nil
		}
	}
	return false, nil
}

// podMonitorRelabelings are the relabelings of the PodMonitor's endpoint i,
// which scrapes JVM i (annotation jmx.handlerkit.dev/jvm-<i>) of the pods
// that exporter injected. Prometheus Operator appends them to its own for
// the endpoint (the selector's keep rules, and namespace, container, pod and
// job labels), in this order:
//
//  1. keep the pods whose jmx.handlerkit.dev/exporter annotation names
//     exporter: pods it injected, not those another exporter owns;
//  2. keep the pods that have JVM i;
//  3. keep the one discovered target named by the discovery anchor:
//     discovery finds a target per declared port and per container without
//     ports, and the agent's port is never declared, so without this a pod
//     would be scraped as often as it declares ports;
//  4. set container to the JVM's container;
//  5. set __address__ to the pod IP and the JVM's agent port (IPv4, then
//     IPv6 in brackets);
//  6. set TargetLabelExporter to the exporter's name.
func podMonitorRelabelings(exporter string, i int) []map[string]any {
	jvm := metaJVMPrefix + strconv.Itoa(i)
	return []map[string]any{
		{"action": "keep", "sourceLabels": []any{metaExporter}, "regex": regexp.QuoteMeta(exporter)},
		{"action": "keep", "sourceLabels": []any{jvm}, "regex": jvmAnnotationRegexp},
		{"action": "replace", "sourceLabels": []any{metaAnchor}, "targetLabel": tmpAnchor},
		{"action": "keepequal", "sourceLabels": []any{metaContainerName, metaContainerPort, metaContainerProto}, "targetLabel": tmpAnchor},
		{"action": "replace", "sourceLabels": []any{jvm}, "regex": jvmAnnotationRegexp, "targetLabel": "container", "replacement": "$1"},
		{"action": "replace", "sourceLabels": []any{jvm, metaPodIP}, "regex": `[^:]+:(\d+);(\d+\.\d+\.\d+\.\d+)`,
			"targetLabel": "__address__", "replacement": "$2:$1"},
		{"action": "replace", "sourceLabels": []any{jvm, metaPodIP}, "regex": `[^:]+:(\d+);([0-9A-Fa-f]*:[0-9A-Fa-f:.]*)`,
			"targetLabel": "__address__", "replacement": "[$2]:$1"},
		{"action": "replace", "targetLabel": TargetLabelExporter, "replacement": exporter},
	}
}

// TargetLabelExporter is the label the operator's PodMonitors put on every
// target (so on up and on every series of the JVM): the exporter's name. The
// alerts (charts/prometheus-jmx-exporter-operator/files/prometheus-rules.yaml)
// find the agents by it.
const TargetLabelExporter = "prometheus_jmx_exporter"

// podMonitorSpec is the spec of ex's PodMonitor with one endpoint per JVM
// index up to jvms (at least one).
func podMonitorSpec(ex *jmxv1alpha1.PrometheusJmxExporter, jvms int) (map[string]any, error) {
	selector, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ex.Spec.Selector)
	if err != nil {
		return nil, err
	}
	endpoints := make([]any, max(jvms, 1))
	for i := range endpoints {
		var relabelings []any
		for _, r := range podMonitorRelabelings(ex.Name, i) {
			relabelings = append(relabelings, r)
		}
		endpoints[i] = map[string]any{"path": "/metrics", "relabelings": relabelings}
	}
	spec := map[string]any{
		"selector":            selector,
		"namespaceSelector":   map[string]any{"matchNames": []any{ex.Namespace}},
		"podMetricsEndpoints": endpoints,
	}
	settings := ex.Spec.PodMonitor
	if settings == nil || settings.Validate() != nil {
		return spec, nil // condition PodMonitorValid says why
	}
	if settings.SampleLimit != nil {
		spec["sampleLimit"] = *settings.SampleLimit
	}
	var metricRelabelings []any
	for _, rc := range settings.MetricRelabelings {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&rc)
		if err != nil {
			return nil, err
		}
		metricRelabelings = append(metricRelabelings, m)
	}
	for _, e := range endpoints {
		e := e.(map[string]any)
		if settings.Interval != "" {
			e["interval"] = settings.Interval
		}
		if settings.ScrapeTimeout != "" {
			e["scrapeTimeout"] = settings.ScrapeTimeout
		}
		if metricRelabelings != nil {
			e["metricRelabelings"] = runtime.DeepCopyJSONValue(metricRelabelings)
		}
	}
	return spec, nil
}

// setPodMonitorCondition sets condition PodMonitorValid in st from
// ex.Spec.PodMonitor, or removes it when the field is absent, and records a
// Warning Event when the settings turn invalid. It is a function of the spec
// alone: podMonitorSpec leaves invalid settings out of the PodMonitor.
func setPodMonitorCondition(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, st *jmxv1alpha1.PrometheusJmxExporterStatus) {
	if ex.Spec.PodMonitor == nil {
		meta.RemoveStatusCondition(&st.Conditions, jmxv1alpha1.ConditionPodMonitorValid)
		return
	}
	c := metav1.Condition{Type: jmxv1alpha1.ConditionPodMonitorValid, Status: metav1.ConditionTrue,
		Reason: jmxv1alpha1.ReasonPodMonitorSettingsValid, ObservedGeneration: ex.Generation,
		Message: "spec.podMonitor is in the exporter's PodMonitor (when the cluster serves PodMonitors)"}
	if err := ex.Spec.PodMonitor.Validate(); err != nil {
		c.Status, c.Reason = metav1.ConditionFalse, jmxv1alpha1.ReasonPodMonitorSettingsInvalid
		c.Message = truncateMsg("Prometheus Operator would refuse spec.podMonitor, so the PodMonitor carries none of it (the JVMs are scraped with the Prometheus' own settings): "+
			strings.ReplaceAll(err.Error(), "\n", "; "), 4000)
		if prev := meta.FindStatusCondition(st.Conditions, c.Type); prev == nil || prev.Status != c.Status || prev.Message != c.Message {
			sdk.EventRecorderFrom(ctx).Event(ex, corev1.EventTypeWarning, c.Reason, c.Message)
		}
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// maxJVMsPerPod is the most JVMs with the agent in one pod of the plan.
func maxJVMsPerPod(p *plan) int {
	per := map[string]int{}
	most := 0
	for _, e := range p.endpoints {
		per[e.Pod]++
		most = max(most, per[e.Pod])
	}
	return most
}

// ensurePodMonitor creates or updates ex's PodMonitor, named like the
// exporter and owned by it (so that it goes with it), with one endpoint per
// JVM of the pod with the most JVMs. A PodMonitor of that name that the
// exporter does not control is left alone and reported.
func (r *Reconciler) ensurePodMonitor(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, p *plan) error {
	if !r.podMonitors || p.spec.Selector == nil {
		return nil
	}
	if sel, err := metav1.LabelSelectorAsSelector(p.spec.Selector); err != nil || sel.Empty() {
		return nil // the exporter's condition says why
	}
	spec, err := podMonitorSpec(ex, maxJVMsPerPod(p))
	if err != nil {
		return err
	}
	pm := &unstructured.Unstructured{}
	pm.SetGroupVersionKind(podMonitorGVK)
	pm.SetNamespace(ex.Namespace)
	pm.SetName(ex.Name)
	res, err := action.CreateOrUpdate(ctx, r.read, nil, pm, func() error {
		if pm.GetResourceVersion() != "" {
			if owner := metav1.GetControllerOf(pm); owner == nil || owner.UID != ex.UID {
				return &foreignPodMonitorError{name: pm.GetName()}
			}
		}
		labels := maps.Clone(pm.GetLabels())
		if labels == nil {
			labels = map[string]string{}
		}
		maps.Copy(labels, r.opts.PodMonitorLabels)
		labels[LabelManagedBy] = fieldManager
		labels[LabelExporter] = ex.Name
		pm.SetLabels(labels)
		if err := action.SetControllerReference(ex, pm, r.op.Scheme()); err != nil {
			return err
		}
		return unstructured.SetNestedField(pm.Object, spec, "spec")
	}, action.WithFieldManager(fieldManager))
	if foreign := (*foreignPodMonitorError)(nil); errors.As(err, &foreign) {
		sdk.EventRecorderFrom(ctx).Eventf(ex, corev1.EventTypeWarning, jmxv1alpha1.ReasonPodMonitorNameTaken,
			"a PodMonitor named %s exists and is not this exporter's, so the operator keeps none for it: rename or delete the other one", foreign.name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("PodMonitor %s/%s: %w", ex.Namespace, ex.Name, err)
	}
	if res != action.Unchanged {
		sdk.LoggerFrom(ctx).Infof("operator: %s PodMonitor %s/%s with %d endpoints", res, ex.Namespace, ex.Name, max(maxJVMsPerPod(p), 1))
	}
	return nil
}

// foreignPodMonitorError: a PodMonitor of the exporter's name that it does
// not control.
type foreignPodMonitorError struct{ name string }

func (e *foreignPodMonitorError) Error() string {
	return "PodMonitor " + e.name + " is not controlled by the exporter"
}
