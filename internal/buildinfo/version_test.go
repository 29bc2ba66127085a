package buildinfo_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
)

const root = "../.."

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestOneVersion: the VERSION file is the release's one version; the
// chart's version and appVersion, the image the manifests and the CRD's
// default name, the image the tests build, the agent's Maven version and
// the version its build_info series reports all carry it, and the Makefile
// stamps it into the binaries.
func TestOneVersion(t *testing.T) {
	v := strings.TrimSpace(read(t, "VERSION"))
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`).MatchString(v) {
		t.Fatalf("VERSION %q is not a semantic version", v)
	}
	tag := "v" + v
	image := "ghcr.io/handlerkit/jmx-agent:" + tag

	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "charts/prometheus-jmx-exporter-operator/Chart.yaml")), &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != v || chart.AppVersion != tag {
		t.Errorf("Chart.yaml: version %q, appVersion %q; want %q and %q", chart.Version, chart.AppVersion, v, tag)
	}
	if jmxv1alpha1.DefaultAgentImage != image {
		t.Errorf("DefaultAgentImage %q, want %q", jmxv1alpha1.DefaultAgentImage, image)
	}
	if testimages.AgentRef != image {
		t.Errorf("testimages.AgentRef %q, want %q: the tests must build the image the manifests name", testimages.AgentRef, image)
	}
	for _, f := range []string{"deploy/kustomization.yaml", "deploy/operator/kustomization.yaml",
		"deploy/operator/cluster-wide/kustomization.yaml", "deploy/overlays/local/kustomization.yaml"} {
		tags := regexp.MustCompile(`(?m)^\s*newTag:\s*(\S+)`).FindAllStringSubmatch(read(t, f), -1)
		if len(tags) == 0 {
			t.Errorf("%s sets no newTag", f)
		}
		for _, m := range tags {
			if m[1] != tag {
				t.Errorf("%s: newTag %s, want %s", f, m[1], tag)
			}
		}
	}
	for _, f := range []string{"deploy/operator/operator.yaml", "deploy/operator/cluster-wide/operator.yaml"} {
		for _, m := range regexp.MustCompile(`jmx-agent:(v[^\s"']+)`).FindAllStringSubmatch(read(t, f), -1) {
			if m[1] != tag {
				t.Errorf("%s names jmx-agent:%s, want %s", f, m[1], tag)
			}
		}
	}
	if m := regexp.MustCompile(`(?s)<artifactId>handlerkit-jmx-agent</artifactId>\s*<version>([^<]+)</version>`).FindStringSubmatch(read(t, "agent/pom.xml")); m == nil || m[1] != v {
		t.Errorf("agent/pom.xml's version: %v, want %s", m, v)
	}
	if !strings.Contains(read(t, "agent/src/main/java/dev/handlerkit/jmxagent/Agent.java"), `static final String VERSION = "`+v+`";`) {
		t.Errorf("Agent.VERSION is not %q: the agent's jmx_exporter_build_info would name another version", v)
	}
	// The install commands the README and docs/install.md show name this
	// release: the chart's --version and the manifest's download path.
	for _, f := range []string{"README.md", "docs/install.md", "docs/release.md"} {
		text := read(t, f)
		for _, m := range regexp.MustCompile(`prometheus-jmx-exporter-operator --version (\S+)`).FindAllStringSubmatch(text, -1) {
			if m[1] != v {
				t.Errorf("%s installs chart version %s, want %s", f, m[1], v)
			}
		}
		for _, m := range regexp.MustCompile(`releases/download/(v[^/\s]+)/`).FindAllStringSubmatch(text, -1) {
			if m[1] != tag {
				t.Errorf("%s downloads release %s, want %s", f, m[1], tag)
			}
		}
	}
	if !strings.Contains(read(t, "README.md"), "releases/download/"+tag+"/") {
		t.Errorf("README.md's install section does not show the release's manifest (releases/download/%s/)", tag)
	}
	mk := read(t, "Makefile")
	for _, want := range []string{"VERSION ?= v$(shell cat VERSION)", "$(BUILDINFO).version=$(VERSION)", "jmx-agent:$(VERSION)"} {
		if !strings.Contains(mk, want) {
			t.Errorf("the Makefile lacks %q", want)
		}
	}
}
