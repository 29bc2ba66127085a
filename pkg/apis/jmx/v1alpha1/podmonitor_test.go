package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"
)

// TestPodMonitorSettingsValidateAsPrometheusOperator: what Prometheus
// Operator refuses and the schema cannot check is refused, naming the field;
// the rest passes.
func TestPodMonitorSettingsValidateAsPrometheusOperator(t *testing.T) {
	for _, c := range []struct {
		name string
		s    *PodMonitorSettings
		want string // "" valid, else a part of the error
	}{
		{"nil", nil, ""},
		{"empty", &PodMonitorSettings{}, ""},
		{"all set", &PodMonitorSettings{Interval: "1m", ScrapeTimeout: "30s", SampleLimit: ptr.To[int64](1000),
			MetricRelabelings: []RelabelConfig{
				{Action: "drop", SourceLabels: []string{"__name__"}, Regex: "jvm_gc_.*"},
				{Action: "LabelDrop", Regex: "area"},
				{Action: "keepequal", SourceLabels: []string{"a"}, TargetLabel: "b"},
				{Action: "hashmod", SourceLabels: []string{"pod"}, TargetLabel: "shard", Modulus: 4},
				{SourceLabels: []string{"pod"}, TargetLabel: "p"},
			}}, ""},
		{"timeout equal to interval", &PodMonitorSettings{Interval: "1m", ScrapeTimeout: "60s"}, ""},
		{"units prometheus knows", &PodMonitorSettings{Interval: "1d", ScrapeTimeout: "1h30m"}, ""},
		{"timeout above interval", &PodMonitorSettings{Interval: "10s", ScrapeTimeout: "11s"}, "scrapeTimeout 11s is longer than interval 10s"},
		{"timeout without interval", &PodMonitorSettings{ScrapeTimeout: "5s"}, "scrapeTimeout needs interval"},
		{"bad duration", &PodMonitorSettings{Interval: "5 minutes"}, "interval"},
		{"negative limit", &PodMonitorSettings{SampleLimit: ptr.To[int64](-1)}, "sampleLimit"},
		{"regex", &PodMonitorSettings{MetricRelabelings: []RelabelConfig{{}, {Action: "drop", Regex: "jvm_(.*"}}}, "metricRelabelings[1]: regex"},
		{"unknown action", &PodMonitorSettings{MetricRelabelings: []RelabelConfig{{Action: "delete"}}}, "unknown action"},
		{"replace without target", &PodMonitorSettings{MetricRelabelings: []RelabelConfig{{Action: "replace"}}}, "needs targetLabel"},
		{"hashmod without modulus", &PodMonitorSettings{MetricRelabelings: []RelabelConfig{{Action: "hashmod", TargetLabel: "x"}}}, "modulus"},
		{"keepequal with regex", &PodMonitorSettings{MetricRelabelings: []RelabelConfig{{Action: "keepequal", TargetLabel: "x", Regex: "a"}}}, "only sourceLabels and targetLabel"},
		{"labeldrop with target", &PodMonitorSettings{MetricRelabelings: []RelabelConfig{{Action: "labeldrop", TargetLabel: "x"}}}, "only regex"},
		{"lowercase with replacement", &PodMonitorSettings{MetricRelabelings: []RelabelConfig{{Action: "lowercase", TargetLabel: "x", Replacement: ptr.To("y")}}}, "no replacement"},
	} {
		err := c.s.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}
