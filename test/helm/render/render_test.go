package render

import (
	"strings"
	"testing"
)

const chart = "../../../charts/prometheus-jmx-exporter-operator"

// TestChartRendersTheCRDFirstAndEveryTemplate renders the chart with its
// defaults: the CRD of crds/ comes first, and every object is a document of
// its own.
func TestChartRendersTheCRDFirstAndEveryTemplate(t *testing.T) {
	docs, err := Chart(chart, "prometheus-jmx-exporter-operator", "ops", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(docs[0], "kind: CustomResourceDefinition") {
		t.Errorf("first document is not the CRD:\n%.200s", docs[0])
	}
	kinds := map[string]int{}
	for _, d := range docs {
		for _, line := range strings.Split(d, "\n") {
			if k, ok := strings.CutPrefix(line, "kind: "); ok {
				kinds[k]++
			}
		}
	}
	// The served, EphemeralContainer and home Roles (Exec is opt-in), and the
	// users' view and edit ClusterRoles.
	want := map[string]int{"CustomResourceDefinition": 1, "ServiceAccount": 1, "Role": 3, "RoleBinding": 3, "ClusterRole": 2,
		"Deployment": 1}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d %s, want %d (all: %v)", kinds[k], k, n, kinds)
		}
	}
}

// TestChartFailsOnValuesThatCannotWork: two replicas without election.
func TestChartFailsOnValuesThatCannotWork(t *testing.T) {
	_, err := Chart(chart, "r", "ops", map[string]any{"leaderElection": "none"})
	if err == nil || !strings.Contains(err.Error(), "exactly one replica") {
		t.Fatalf("err %v", err)
	}
}
