package render

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"sigs.k8s.io/yaml"
)

// packageChart packages the chart as `make release` does (hack/release
// chart, internal/release.PackageChart, in the main module, which does not
// import Helm) for registry, and returns the .tgz.
func packageChart(t *testing.T, registry string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out := t.TempDir()
	abs, err := filepath.Abs(repo)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "go", "run", "-trimpath", "./hack/release", "chart", "-out", out, "-registry", registry)
	cmd.Dir = abs
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run ./hack/release chart: %v\n%s", err, stderr.String())
	}
	file := strings.TrimSpace(string(stdout))
	version, err := os.ReadFile(filepath.Join(repo, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(out, "prometheus-jmx-exporter-operator-"+strings.TrimSpace(string(version))+".tgz"); file != want {
		t.Fatalf("the chart was packaged as %s, want %s", file, want)
	}
	return file
}

// TestPackagedChartIsTheChart: the .tgz that `make release` writes loads
// with Helm's loader, holds exactly the files Helm loads from the chart's
// directory (.helmignore honoured), with the same contents, and renders
// as the directory does, with the chart's defaults and with every value
// set (testdata/all-values.yaml).
func TestPackagedChartIsTheChart(t *testing.T) {
	tgz := packageChart(t, "ghcr.io/handlerkit")
	fromDir, err := loader.Load(chart)
	if err != nil {
		t.Fatal(err)
	}
	fromTgz, err := loader.Load(tgz)
	if err != nil {
		t.Fatalf("Helm cannot load %s: %v", tgz, err)
	}
	if fromTgz.Metadata.Name != fromDir.Metadata.Name || fromTgz.Metadata.Version != fromDir.Metadata.Version {
		t.Errorf("packaged chart %s %s, the directory's %s %s", fromTgz.Metadata.Name, fromTgz.Metadata.Version,
			fromDir.Metadata.Name, fromDir.Metadata.Version)
	}
	files := func(raw map[string][]byte) []string {
		return slices.Sorted(func(yield func(string) bool) {
			for k := range raw {
				if !yield(k) {
					return
				}
			}
		})
	}
	dirRaw, tgzRaw := map[string][]byte{}, map[string][]byte{}
	for _, f := range fromDir.Raw {
		dirRaw[f.Name] = f.Data
	}
	for _, f := range fromTgz.Raw {
		tgzRaw[f.Name] = f.Data
	}
	if !slices.Equal(files(dirRaw), files(tgzRaw)) {
		t.Errorf("the package holds %v,\nHelm loads from the directory %v", files(tgzRaw), files(dirRaw))
	}
	if _, ok := tgzRaw["README.md.gotmpl"]; ok {
		t.Error("the package holds README.md.gotmpl, which .helmignore leaves out")
	}
	for name, data := range dirRaw {
		if got, ok := tgzRaw[name]; ok && string(got) != string(data) {
			t.Errorf("the package's %s differs from the directory's", name)
		}
	}

	allValues, err := os.ReadFile("testdata/all-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, vals := range map[string]string{"defaults": "", "all values": string(allValues)} {
		var v map[string]any
		if err := yaml.Unmarshal([]byte(vals), &v); err != nil {
			t.Fatal(err)
		}
		want, err := Chart(chart, "jmx", "ops", v)
		if err != nil {
			t.Fatalf("%s: the directory: %v", name, err)
		}
		got, err := Chart(tgz, "jmx", "ops", v)
		if err != nil {
			t.Fatalf("%s: the package: %v", name, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: the package renders %d documents, the directory %d, and they differ", name, len(got), len(want))
		}
	}
}

// TestPackagedChartNamesTheReleaseRegistry: packaged for another registry,
// the chart's default image is that registry's jmx-agent, as the release's
// install manifests name it, and nothing else changes.
func TestPackagedChartNamesTheReleaseRegistry(t *testing.T) {
	const registry = "127.0.0.1:5000/handlerkit"
	tgz := packageChart(t, registry)
	want, err := Chart(chart, "jmx", "ops", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Chart(tgz, "jmx", "ops", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("the package renders %d documents, the directory %d", len(got), len(want))
	}
	ch, err := loader.Load(chart)
	if err != nil {
		t.Fatal(err)
	}
	image := "jmx-agent:" + ch.Metadata.AppVersion
	changed := 0
	for i := range got {
		if got[i] == want[i] {
			continue
		}
		changed++
		if strings.ReplaceAll(got[i], registry+"/"+image, "ghcr.io/handlerkit/"+image) != want[i] {
			t.Errorf("document %d differs by more than the image's registry:\n%s", i, got[i])
		}
	}
	if changed == 0 {
		t.Errorf("no document names %s/%s", registry, image)
	}
}
