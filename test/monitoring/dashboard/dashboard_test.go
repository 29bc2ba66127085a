package dashboard

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTheDeployedDashboardParses: every query of deploy/grafana's dashboard
// parses with Prometheus' PromQL parser and names at least one metric;
// test/e2e checks the names against a real Prometheus's series.
func TestTheDeployedDashboardParses(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "grafana", "prometheus-jmx-exporter.json"))
	if err != nil {
		t.Fatal(err)
	}
	qs, err := Queries(data)
	if err != nil {
		t.Fatal(err)
	}
	panels := map[string]bool{}
	var metrics []string
	for _, q := range qs {
		panels[q.Panel] = true
		metrics = append(metrics, q.Metrics...)
		if strings.Contains(q.PromQL, "$") && !strings.Contains(q.PromQL, "$1") {
			t.Errorf("%s: a variable survived substitution: %s", q.Panel, q.PromQL)
		}
	}
	// Both halves are there: the JVMs' and the operator's.
	for _, m := range []string{"jvm_memory_used_bytes", "jvm_gc_collection_seconds_sum", "jmx_scrape_error",
		"jmx_operator_injections_total", "leader_election_master_status", "workqueue_depth"} {
		if !slices.Contains(metrics, m) {
			t.Errorf("no panel shows %s", m)
		}
	}
	for _, v := range []string{"variable namespace", "variable pod", "variable operator_namespace"} {
		if !panels[v] {
			t.Errorf("%s is missing", v)
		}
	}
	t.Logf("%d queries in %d panels and variables", len(qs), len(panels))
}

func TestAQueryThatDoesNotParseIsNamed(t *testing.T) {
	_, err := Queries([]byte(`{"panels": [{"type": "row", "title": "r", "panels": [
		{"type": "timeseries", "title": "Broken", "targets": [{"expr": "sum(rate(x[$__rate_interval])"}]}]},
		{"type": "stat", "title": "Empty", "targets": []},
		{"type": "stat", "title": "Nameless", "targets": [{"expr": "vector(1)"}]}]}`))
	if err == nil {
		t.Fatal("a dashboard with a broken query parsed")
	}
	for _, want := range []string{`panel "Broken"`, `panel "Empty" has no query`, "Nameless", "names no metric"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

func TestSubstituteAndMetricNames(t *testing.T) {
	qs, err := Queries([]byte(`{"panels": [{"type": "timeseries", "title": "P", "targets": [
		{"expr": "rate(a_total{ns=~\"$namespace\"}[$__rate_interval]) / on (i) group_left () {__name__=\"b\", ns=~\"${namespace}\"}"}]}],
		"templating": {"list": [{"name": "namespace", "type": "query", "query": {"query": "label_values(c{x=\"y\"}, namespace)"}},
		{"name": "ds", "type": "datasource", "query": "prometheus"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 {
		t.Fatalf("%d queries, want the panel's and the variable's: %v", len(qs), qs)
	}
	if got := qs[0].PromQL; got != `rate(a_total{ns=~".*"}[5m]) / on (i) group_left () {__name__="b", ns=~".*"}` {
		t.Errorf("substituted %q", got)
	}
	if !slices.Equal(qs[0].Metrics, []string{"a_total", "b"}) || !slices.Equal(qs[1].Metrics, []string{"c"}) || qs[1].Panel != "variable namespace" {
		t.Errorf("queries %v", qs)
	}
}
