package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func values(t *testing.T, text string) ([]Value, error) {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	return Values(&doc)
}

// TestValuesTakeTheDashDashCommentAndTheDefault: a "# --" comment over
// several lines is one description; a heading above it is not part of it;
// nested keys get their path; a documented map is one row and its children
// need no comment; defaults are compact JSON.
func TestValuesTakeTheDashDashCommentAndTheDefault(t *testing.T) {
	got, err := values(t, `# The file's heading.

image:
  # -- The image's
  # repository.
  repository: ghcr.io/x/y
  # -- Tag. Empty: appVersion.
  tag: ""

# Section heading, not documentation.
# -- Replicas.
replicas: 2
# -- Security context.
securityContext:
  runAsNonRoot: true
  capabilities: {drop: [ALL]}
# -- Nothing yet.
budget: null
# -- Pipes | escaped.
list: [a, b]
`)
	if err != nil {
		t.Fatal(err)
	}
	want := []Value{
		{Key: "image.repository", Type: "string", Default: `"ghcr.io/x/y"`, Description: "The image's repository."},
		{Key: "image.tag", Type: "string", Default: `""`, Description: "Tag. Empty: appVersion."},
		{Key: "replicas", Type: "int", Default: "2", Description: "Replicas."},
		{Key: "securityContext", Type: "object", Default: `{"capabilities":{"drop":["ALL"]},"runAsNonRoot":true}`, Description: "Security context."},
		{Key: "budget", Type: "null", Default: "null", Description: "Nothing yet."},
		{Key: "list", Type: "list", Default: `["a","b"]`, Description: "Pipes | escaped."},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("values\n%+v\nwant\n%+v", got, want)
	}
	if table := valuesTable(got); !strings.Contains(table, `Pipes \| escaped.`) || !strings.Contains(table, "| `replicas` | int | `2` | Replicas. |") {
		t.Errorf("table:\n%s", table)
	}
}

// TestValuesFailOnAnUndocumentedValue: every value is documented, itself
// or through an ancestor.
func TestValuesFailOnAnUndocumentedValue(t *testing.T) {
	_, err := values(t, "image:\n  # -- Repo.\n  repository: x\n  tag: \"\"\nextraArgs: []\n")
	if err == nil || !strings.Contains(err.Error(), "image.tag, extraArgs") {
		t.Errorf("err %v, want one naming image.tag and extraArgs", err)
	}
	_, err = values(t, "# --\nreplicas: 1\n")
	if err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("err %v, want one about the empty comment", err)
	}
}

// TestRenderWritesTheTemplateAndCheckFailsWhenStale runs the command on a
// chart in a temporary directory: it writes README.md from the template,
// -check passes, and fails once values.yaml changes.
func TestRenderWritesTheTemplateAndCheckFailsWhenStale(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("Chart.yaml", "apiVersion: v2\nname: demo\nversion: 1.2.3\nappVersion: v9\nkubeVersion: '>=1.25.0-0'\ndescription: A demo.\n")
	write("values.yaml", "# -- Replicas.\nreplicas: 2\n")
	write("README.md.gotmpl", "# {{ .Name }} {{ .Version }} ({{ .AppVersion }}, {{ .KubeVersion }})\n\n{{ valuesTable .Values }}")
	var out strings.Builder
	if err := run([]string{dir}, &out); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := "# demo 1.2.3 (v9, >=1.25.0-0)\n\n| Key | Type | Default | Description |\n| --- | --- | --- | --- |\n| `replicas` | int | `2` | Replicas. |\n"
	if string(got) != want {
		t.Errorf("README.md\n%s\nwant\n%s", got, want)
	}
	if err := run([]string{"-check", dir}, &out); err != nil {
		t.Errorf("-check on a fresh README.md: %v", err)
	}
	write("values.yaml", "# -- Replicas of the operator.\nreplicas: 2\n")
	if err := run([]string{"-check", dir}, &out); err == nil || !strings.Contains(err.Error(), "stale") {
		t.Errorf("-check after a change: %v, want stale", err)
	}
}

// TestTheChartsReadmeIsFresh is make verify's check, as a test.
func TestTheChartsReadmeIsFresh(t *testing.T) {
	var out strings.Builder
	if err := run([]string{"-check", "../../charts/prometheus-jmx-exporter-operator"}, &out); err != nil {
		t.Error(err)
	}
}
