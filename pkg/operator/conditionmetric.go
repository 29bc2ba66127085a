package operator

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prometheus/client_golang/prometheus"
)

// conditionMetric is jmx_operator_exporter_condition: 1 for each condition
// an exporter's status holds, labelled with its type, status and reason, as
// the leader last computed it: a change that is not urgent reaches the
// status object up to StatusDelay later (paced writes), the gauge at once.
// The alerts
// (charts/prometheus-jmx-exporter-operator/files/prometheus-rules.yaml) read
// Degraded from it.
type conditionMetric struct {
	vec *prometheus.GaugeVec
}

// newConditionMetric registers the gauge in reg (nil: none; a gauge of
// that name already there is reused, as newMetrics does).
func newConditionMetric(reg prometheus.Registerer) *conditionMetric {
	vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "jmx_operator_exporter_condition",
		Help: "1 for each condition of each exporter's status, by type, status (True, False, Unknown) and reason.",
	}, []string{"namespace", "exporter", "type", "status", "reason"})
	if reg != nil {
		if err := reg.Register(vec); err != nil {
			if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
				if prev, ok := are.ExistingCollector.(*prometheus.GaugeVec); ok {
					vec = prev
				}
			}
		}
	}
	return &conditionMetric{vec: vec}
}

// set replaces the exporter's series with one per condition.
func (m *conditionMetric) set(namespace, exporter string, conds []metav1.Condition) {
	m.forget(namespace, exporter)
	for _, c := range conds {
		m.vec.WithLabelValues(namespace, exporter, c.Type, string(c.Status), c.Reason).Set(1)
	}
}

// forget deletes the exporter's series.
func (m *conditionMetric) forget(namespace, exporter string) {
	m.vec.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "exporter": exporter})
}
