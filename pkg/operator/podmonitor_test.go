package operator

import (
	"context"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

func exporterWithPodMonitor(s *jmxv1alpha1.PodMonitorSettings) *jmxv1alpha1.PrometheusJmxExporter {
	return &jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", Generation: 3},
		Spec: jmxv1alpha1.PrometheusJmxExporterSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "orders"}},
			PodMonitor: s}}
}

// TestPodMonitorCarriesTheExporterSettings: spec.podMonitor's interval,
// scrapeTimeout and metricRelabelings go on every endpoint, its sampleLimit
// on the spec, with Prometheus Operator's field names; every endpoint names
// the exporter in TargetLabelExporter.
func TestPodMonitorCarriesTheExporterSettings(t *testing.T) {
	ex := exporterWithPodMonitor(&jmxv1alpha1.PodMonitorSettings{Interval: "1m", ScrapeTimeout: "20s", SampleLimit: ptr.To[int64](5000),
		MetricRelabelings: []jmxv1alpha1.RelabelConfig{{Action: "drop", SourceLabels: []string{"__name__"}, Regex: "jvm_buffer_.*"}}})
	spec, err := podMonitorSpec(ex, 2)
	if err != nil {
		t.Fatal(err)
	}
	if spec["sampleLimit"] != int64(5000) {
		t.Errorf("sampleLimit %v", spec["sampleLimit"])
	}
	wantRelabel := []any{map[string]any{"action": "drop", "sourceLabels": []any{"__name__"}, "regex": "jvm_buffer_.*"}}
	for i, e := range spec["podMetricsEndpoints"].([]any) {
		ep := e.(map[string]any)
		if ep["interval"] != "1m" || ep["scrapeTimeout"] != "20s" || !reflect.DeepEqual(ep["metricRelabelings"], wantRelabel) {
			t.Errorf("endpoint %d: %v", i, ep)
		}
		rels := ep["relabelings"].([]any)
		last := rels[len(rels)-1].(map[string]any)
		if last["targetLabel"] != TargetLabelExporter || last["replacement"] != "orders" {
			t.Errorf("endpoint %d: last relabeling %v, want %s=orders", i, last, TargetLabelExporter)
		}
	}
}

// TestInvalidPodMonitorSettingsAreLeftOutAndReported: settings Prometheus
// Operator would refuse stay out of the PodMonitor (which it would refuse
// whole, scraping nothing) and PodMonitorValid=False says why; valid ones
// make it True; none removes it.
func TestInvalidPodMonitorSettingsAreLeftOutAndReported(t *testing.T) {
	ctx := context.Background()
	ex := exporterWithPodMonitor(&jmxv1alpha1.PodMonitorSettings{Interval: "10s", ScrapeTimeout: "30s", SampleLimit: ptr.To[int64](10)})
	spec, err := podMonitorSpec(ex, 1)
	if err != nil {
		t.Fatal(err)
	}
	ep := spec["podMetricsEndpoints"].([]any)[0].(map[string]any)
	if _, ok := spec["sampleLimit"]; ok || ep["interval"] != nil || ep["scrapeTimeout"] != nil {
		t.Errorf("invalid settings in the PodMonitor: %v", spec)
	}
	st := &jmxv1alpha1.PrometheusJmxExporterStatus{}
	setPodMonitorCondition(ctx, ex, st)
	c := meta.FindStatusCondition(st.Conditions, jmxv1alpha1.ConditionPodMonitorValid)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != jmxv1alpha1.ReasonPodMonitorSettingsInvalid || c.ObservedGeneration != 3 {
		t.Fatalf("condition %+v", c)
	}
	ex.Spec.PodMonitor.ScrapeTimeout = "10s"
	setPodMonitorCondition(ctx, ex, st)
	if c := meta.FindStatusCondition(st.Conditions, jmxv1alpha1.ConditionPodMonitorValid); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("valid settings: condition %+v", c)
	}
	ex.Spec.PodMonitor = nil
	setPodMonitorCondition(ctx, ex, st)
	if len(st.Conditions) != 0 {
		t.Errorf("no spec.podMonitor: conditions %+v", st.Conditions)
	}
}
