package release

import (
	"strings"
	"testing"
)

// TestRegistriesNeedAHostAndTLS: a registry names its host; plain HTTP is
// for localhost and 127.0.0.1 only.
func TestRegistriesNeedAHostAndTLS(t *testing.T) {
	for _, tc := range []struct {
		registry       string
		valid, plainOK bool
	}{
		{"ghcr.io/handlerkit", true, false},
		{"127.0.0.1:5000/handlerkit", true, true},
		{"localhost:5000", true, true},
		{"handlerkit", false, false},
		{"handlerkit/sub", false, false},
		{"Bad Registry", false, false},
	} {
		err := checkRegistry(tc.registry)
		if (err == nil) != tc.valid {
			t.Errorf("checkRegistry(%q) = %v, want valid %v", tc.registry, err, tc.valid)
		}
		if !tc.valid {
			continue
		}
		opts, err := registryOptions(tc.registry)
		if err != nil {
			t.Errorf("registryOptions(%q): %v", tc.registry, err)
		}
		if plain := len(opts) == 2; plain != tc.plainOK {
			t.Errorf("registryOptions(%q) allows plain HTTP: %v, want %v", tc.registry, plain, tc.plainOK)
		}
	}
	if _, err := registryOptions("192.168.1.10:5000/handlerkit"); err == nil {
		t.Error("registryOptions accepted a private address, which go-containerregistry reaches over plain HTTP")
	}
}

// TestHelmignoreRules: base-name and rooted patterns, directories only
// with a trailing slash, Helm's hidden templates rule.
func TestHelmignoreRules(t *testing.T) {
	h := helmignore{"templates/.?*", "README.md.gotmpl", "*.bak", "ci/", "docs/*.md"}
	for rel, want := range map[string]bool{
		"README.md.gotmpl":    true,
		"README.md":           false,
		"templates/x.yaml":    false,
		"templates/.x.swp":    true,
		"files/a.bak":         true,
		"ci":                  true, // a directory
		"docs/a.md":           true,
		"files/docs/a.md":     false,
		"values.schema.json":  false,
		"files/crds/crd.yaml": false,
	} {
		if got := h.ignored(rel, rel == "ci"); got != want {
			t.Errorf("ignored(%q) = %v, want %v", rel, got, want)
		}
	}
	if h.ignored("ci", false) {
		t.Error("a file named ci matched the directory rule ci/")
	}
}

// TestDependencyListParsing: compile and runtime artefacts, with and
// without a classifier; test scope and the header left out.
func TestDependencyListParsing(t *testing.T) {
	out := `
The following files have been resolved:
   io.prometheus.jmx:collector:jar:1.6.0:compile
   io.prometheus:prometheus-metrics-exposition-formats:jar:1.7.0:runtime
   com.example:natives:jar:linux-x86_64:2.0:compile
   junit:junit:jar:4.13.2:test
`
	got, err := parseDependencyList([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, m := range got {
		s = append(s, m.String())
	}
	want := "com.example:natives:2.0 io.prometheus.jmx:collector:1.6.0 io.prometheus:prometheus-metrics-exposition-formats:1.7.0"
	if strings.Join(s, " ") != want {
		t.Errorf("parsed %v, want %s", s, want)
	}
	if _, err := parseDependencyList([]byte("a:b:c\n")); err == nil {
		t.Error("a line of three fields was accepted")
	}
}
