package workload

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

// DesiredStatus is the realistic handler's logic, the same for every
// contender: the status should record the generation it describes and
// whether the ConfigMap the exporter names holds its key. cm is nil when the
// ConfigMap does not exist. It returns the status to write and whether it
// differs from the one the exporter has; it does not modify e.
func DesiredStatus(e *jmxv1alpha1.PrometheusJmxExporter, cm *corev1.ConfigMap) (jmxv1alpha1.PrometheusJmxExporterStatus, bool) {
	want := metav1.Condition{
		Type: jmxv1alpha1.ConditionConfigValid, Status: metav1.ConditionTrue,
		Reason: "Found", Message: "the config map holds the key", ObservedGeneration: e.Generation,
	}
	if cm == nil {
		want.Status, want.Reason, want.Message = metav1.ConditionFalse, "ConfigMapMissing", "the config map does not exist"
	} else if _, ok := cm.Data[ConfigMapKey]; !ok {
		want.Status, want.Reason, want.Message = metav1.ConditionFalse, "KeyMissing", "the config map lacks the key"
	}
	have := apimeta.FindStatusCondition(e.Status.Conditions, want.Type)
	if e.Status.ObservedGeneration == e.Generation && have != nil && have.Status == want.Status &&
		have.Reason == want.Reason && have.Message == want.Message && have.ObservedGeneration == want.ObservedGeneration {
		return e.Status, false
	}
	status := *e.Status.DeepCopy()
	status.ObservedGeneration = e.Generation
	apimeta.SetStatusCondition(&status.Conditions, want)
	return status, true
}

// ConfigMapNameOf is the ConfigMap e reads its config from, or "".
func ConfigMapNameOf(e *jmxv1alpha1.PrometheusJmxExporter) string {
	if e.Spec.Config == nil {
		return ""
	}
	return e.Spec.Config.ConfigMapName
}

// StatusPatch is the JSON merge patch that sets status on the status
// subresource. It carries no resourceVersion, so it cannot conflict with
// another writer; every contender sends these same bytes.
func StatusPatch(status jmxv1alpha1.PrometheusJmxExporterStatus) ([]byte, error) {
	data, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return nil, fmt.Errorf("workload: status patch: %w", err)
	}
	return data, nil
}
