package operator

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

// docBlock returns the YAML block that follows the HTML comment starting
// with marker in docs/operator.md.
func docBlock(t *testing.T, marker string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "operator.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "<!-- "+marker)
	if !ok {
		t.Fatalf("docs/operator.md has no <!-- %s comment", marker)
	}
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatalf("no yaml block after <!-- %s", marker)
	}
	return []byte(block)
}

// normalized decodes YAML or JSON into plain values, for comparison.
func normalized(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func fromYAML(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return normalized(t, v)
}

// TestDocsShowTheScrapeJobAndThePodMonitor: docs/operator.md shows exactly
// the kubernetes-pods job of deploy/prometheus and exactly the PodMonitor the
// operator writes for its example.
func TestDocsShowTheScrapeJobAndThePodMonitor(t *testing.T) {
	job, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus", "kubernetes-pods.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fromYAML(t, docBlock(t, "kubernetes-pods job")), fromYAML(t, job); !reflect.DeepEqual(got, want) {
		t.Errorf("the docs' kubernetes-pods job differs from deploy/prometheus/kubernetes-pods.yaml:\n%v\n%v", got, want)
	}

	ex := &jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop"},
		Spec: jmxv1alpha1.PrometheusJmxExporterSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "orders"}}}}
	spec, err := podMonitorSpec(ex, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := normalized(t, map[string]any{
		"apiVersion": podMonitorGVK.GroupVersion().String(), "kind": podMonitorGVK.Kind,
		"metadata": map[string]any{"name": "orders", "namespace": "shop",
			"labels": map[string]any{LabelManagedBy: fieldManager, LabelExporter: "orders"}},
		"spec": spec,
	})
	if got := fromYAML(t, docBlock(t, "PodMonitor of exporter orders")); !reflect.DeepEqual(got, want) {
		gotYAML, _ := yaml.Marshal(got)
		wantYAML, _ := yaml.Marshal(want)
		t.Errorf("the docs' PodMonitor:\n%s\nwhat the operator writes:\n%s", gotYAML, wantYAML)
	}
}
