package docslint

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// workflow is what TestReleaseWorkflow reads of a GitHub Actions workflow
// (with YAML 1.2's reader: YAML 1.1's, sigs.k8s.io/yaml's, reads the key
// "on" as true).
type workflow struct {
	On struct {
		Push struct {
			Tags []string `yaml:"tags"`
		} `yaml:"push"`
	} `yaml:"on"`
	Jobs map[string]struct {
		Steps []struct {
			Name string            `yaml:"name"`
			Uses string            `yaml:"uses"`
			Run  string            `yaml:"run"`
			With map[string]any    `yaml:"with"`
			Env  map[string]string `yaml:"env"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

// TestReleaseWorkflow: .github/workflows/release.yaml runs on tags v*,
// takes Go's version from go.mod, calls only make targets the Makefile
// defines (make release, then make push), and before them runs a step
// that passes for the tag v$(cat VERSION) and fails for any other (the
// step's own script, run here).
func TestReleaseWorkflow(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, ".github", "workflows", "release.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf workflow
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(wf.On.Push.Tags, []string{"v*"}) {
		t.Errorf("the workflow runs on tags %v, want [v*]", wf.On.Push.Tags)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(makefile), -1) {
		targets[m[1]] = true
	}
	version, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	tag := "v" + strings.TrimSpace(string(version))
	if len(wf.Jobs) != 1 {
		t.Fatalf("the workflow has %d jobs, want one", len(wf.Jobs))
	}
	for _, job := range wf.Jobs {
		var made []string
		checked, goFromMod := -1, false
		for i, s := range job.Steps {
			if strings.HasPrefix(s.Uses, "actions/setup-go@") && s.With["go-version-file"] == "go.mod" {
				goFromMod = true
			}
			for _, m := range regexp.MustCompile(`\bmake ([a-z][a-z0-9-]*)`).FindAllStringSubmatch(s.Run, -1) {
				if !targets[m[1]] {
					t.Errorf("step %q runs make %s, which the Makefile does not define", s.Name, m[1])
				}
				made = append(made, m[1])
			}
			if strings.Contains(s.Run, "cat VERSION") && checked < 0 {
				checked = i
				for _, c := range []struct {
					tag  string
					pass bool
				}{{tag, true}, {tag + ".1", false}, {"v0.0.0", false}, {"", false}} {
					cmd := exec.Command("bash", "-e", "-c", s.Run)
					cmd.Dir = root
					cmd.Env = append(os.Environ(), "TAG="+c.tag, "GITHUB_REF_NAME="+c.tag)
					out, err := cmd.CombinedOutput()
					if (err == nil) != c.pass {
						t.Errorf("step %q with tag %q: %v (%s), want passing %v", s.Name, c.tag, err, out, c.pass)
					}
				}
			}
			if strings.Contains(s.Run, "${{") {
				t.Errorf("step %q puts an expression into its script; pass it through env", s.Name)
			}
		}
		if !goFromMod {
			t.Error("no actions/setup-go step takes the version from go.mod (go-version-file: go.mod)")
		}
		if !slices.Equal(made, []string{"release", "push"}) {
			t.Errorf("the workflow runs make %v, want release then push", made)
		}
		if checked < 0 {
			t.Error("no step checks the tag against VERSION")
		}
		for i, s := range job.Steps {
			if strings.Contains(s.Run, "make ") && i < checked {
				t.Errorf("step %q runs make before the tag is checked", s.Name)
			}
		}
	}
}
