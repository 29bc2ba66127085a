// Package rules tests the alerts that the chart and deploy/prometheus ship
// (charts/prometheus-jmx-exporter-operator/files/prometheus-rules.yaml) with
// Prometheus' own rule file parser and PromQL parser: the file is one
// Prometheus loads, every alert is complete, every series it reads is one
// that docs/metrics.md documents, and the PrometheusRule for kustomize users
// holds the same groups. alerts_test.go evaluates every alert over synthetic
// series with Prometheus' rule manager, as `promtool test rules` does, and
// test/e2e (TestAgentDownAlertFires) evaluates them on a real Prometheus.
package rules

import (
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// The files, relative to the repository root.
const (
	rulesFile          = "charts/prometheus-jmx-exporter-operator/files/prometheus-rules.yaml"
	prometheusRuleFile = "deploy/prometheus/prometheus-rule.yaml"
	metricsDoc         = "docs/metrics.md"
)

func repoFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRulesLoadAndEveryAlertIsComplete: Prometheus' parser accepts the file
// (expressions and annotation templates included); the alerts are the four
// the docs describe, each with a severity, a summary and a description.
func TestRulesLoadAndEveryAlertIsComplete(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.Parse(repoFile(t, rulesFile), false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("Prometheus refuses %s: %v", rulesFile, errs)
	}
	doc := string(repoFile(t, metricsDoc))
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a recording rule %q; only alerts belong here", g.Name, r.Record)
				continue
			}
			alerts = append(alerts, r.Alert)
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: annotations %v, want a summary and a description", r.Alert, r.Annotations)
			}
			if !strings.Contains(doc, "`"+r.Alert+"`") {
				t.Errorf("%s is not in %s", r.Alert, metricsDoc)
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("%s: %v", r.Alert, err)
			}
			for _, name := range metricNames(expr) {
				if name != "up" && !strings.Contains(doc, "`"+name+"`") {
					t.Errorf("%s reads %s, which %s does not document", r.Alert, name, metricsDoc)
				}
			}
		}
	}
	want := []string{"HandlerkitExporterDegraded", "HandlerkitInjectionFailures", "HandlerkitJmxAgentDown", "HandlerkitOperatorNotLeading"}
	slices.Sort(alerts)
	if !slices.Equal(alerts, want) {
		t.Errorf("alerts %v, want %v", alerts, want)
	}
}

// metricNames are the metric names expr selects.
func metricNames(expr parser.Expr) []string {
	var names []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					names = append(names, m.Value)
				}
			}
		}
		return nil
	})
	return names
}

// TestPrometheusRuleIsTheChartsRules: deploy/prometheus's PrometheusRule,
// for kustomize users, holds exactly the chart's rule groups.
func TestPrometheusRuleIsTheChartsRules(t *testing.T) {
	var rule struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Spec       map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(repoFile(t, prometheusRuleFile), &rule); err != nil {
		t.Fatal(err)
	}
	var groups map[string]any
	if err := yaml.Unmarshal(repoFile(t, rulesFile), &groups); err != nil {
		t.Fatal(err)
	}
	if rule.APIVersion != "monitoring.coreos.com/v1" || rule.Kind != "PrometheusRule" {
		t.Errorf("%s is a %s %s", prometheusRuleFile, rule.APIVersion, rule.Kind)
	}
	if !reflect.DeepEqual(rule.Spec, groups) {
		gotYAML, _ := yaml.Marshal(rule.Spec)
		wantYAML, _ := yaml.Marshal(groups)
		t.Errorf("%s's spec is not %s: regenerate it (the file's header says how)\nspec:\n%s\nfile:\n%s", prometheusRuleFile, rulesFile, gotYAML, wantYAML)
	}
}
