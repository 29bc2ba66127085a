package operator

import (
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestInjectionFailuresMetricStartsAtZero: jmx_operator_injection_failures_total
// has a series at 0 for every enabled strategy and its /reconfigure before any
// injection (so that HandlerkitInjectionFailures' increase() sees the first
// failure), counts the permanent failures that jmx_operator_injections_total
// counts as result="failure", and nothing else.
func TestInjectionFailuresMetricStartsAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.initStrategies("EphemeralContainer", "Exec")
	want := map[string]float64{"EphemeralContainer": 0, "EphemeralContainer/reconfigure": 0, "Exec": 0, "Exec/reconfigure": 0}
	if got := failureSeries(t, reg); !maps.Equal(got, want) {
		t.Fatalf("before any injection: %v, want %v", got, want)
	}

	m.observe("EphemeralContainer", resultRetry, "PortInUse", time.Second)
	m.observe("EphemeralContainer", resultSuccess, "", time.Second)
	m.observe("EphemeralContainer", resultSuccess, "NoJVMFound", time.Second)
	m.observe("Exec/reconfigure", resultRetry, "ReconfigureFailed", time.Second)
	if got := failureSeries(t, reg); !maps.Equal(got, want) {
		t.Fatalf("after retries and successes: %v, want %v", got, want)
	}

	m.observe("EphemeralContainer", resultFailure, "AttachDisabled", time.Second)
	m.observe("EphemeralContainer", resultFailure, "InsufficientMemory", time.Second)
	m.observe("Exec/reconfigure", resultFailure, "ConfigRejected", time.Second)
	want["EphemeralContainer"], want["Exec/reconfigure"] = 2, 1
	if got := failureSeries(t, reg); !maps.Equal(got, want) {
		t.Errorf("after three failures: %v, want %v", got, want)
	}
	if again := newMetrics(reg); again.failures != m.failures {
		t.Error("a second newMetrics on the registry made a second counter")
	}
}

// failureSeries is reg's jmx_operator_injection_failures_total by strategy.
func failureSeries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "jmx_operator_injection_failures_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "strategy" {
					out[l.GetValue()] = s.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
