package operator

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestConditionMetricFollowsTheStatus: one series per condition, replaced
// when the conditions change and gone with the exporter.
func TestConditionMetricFollowsTheStatus(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newConditionMetric(reg)
	m.set("shop", "orders", []metav1.Condition{{Type: "Ready", Status: "False", Reason: "InjectionPending"}, {Type: "Degraded", Status: "True", Reason: "InjectionFailed"}})
	m.set("shop", "orders", []metav1.Condition{{Type: "Ready", Status: "True", Reason: "AllInjected"}, {Type: "Degraded", Status: "False", Reason: "NoFailures"}})
	m.set("shop", "cart", []metav1.Condition{{Type: "Ready", Status: "True", Reason: "AllInjected"}})
	want := []string{
		"cart/Ready=True AllInjected",
		"orders/Degraded=False NoFailures",
		"orders/Ready=True AllInjected",
	}
	if got := conditionSeries(t, reg); !slices.Equal(got, want) {
		t.Errorf("series %v, want %v", got, want)
	}
	m.forget("shop", "orders")
	if got := conditionSeries(t, reg); !slices.Equal(got, want[:1]) {
		t.Errorf("after forgetting orders: %v, want %v", got, want[:1])
	}
	if again := newConditionMetric(reg); again.vec != m.vec {
		t.Error("a second registration made a second gauge")
	}
}

// conditionSeries lists reg's jmx_operator_exporter_condition series of
// value 1 as "exporter/type=status reason", sorted.
func conditionSeries(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if f.GetName() != "jmx_operator_exporter_condition" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if m.GetGauge().GetValue() == 1 {
				out = append(out, l["exporter"]+"/"+l["type"]+"="+l["status"]+" "+l["reason"])
			}
		}
	}
	slices.Sort(out)
	return out
}
