package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/handlerkit/handlerkit/pkg/images/testimages"
)

// dockerfileStage is one FROM ... stage of the Dockerfile: its base and its
// instructions, continuation lines joined.
type dockerfileStage struct {
	from  string
	lines []string
}

func readDockerfile(t *testing.T) (args map[string]string, stages []dockerfileStage) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	args = map[string]string{}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			stages = append(stages, dockerfileStage{from: strings.Fields(rest)[0]})
			continue
		case "ARG":
			k, v, _ := strings.Cut(rest, "=")
			args[k] = v
		}
		if len(stages) > 0 {
			stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
		}
	}
	return args, stages
}

// TestDockerfileHasTheTestImagesLayout keeps the Dockerfile's image equal, in
// what the manifests rely on, to the agent image the tests and the demo build
// without Docker (pkg/images/testimages): the same three paths and
// entrypoint, static binaries, a non-root user, nothing else in the final
// image, and the java agent built from agent/ with a pinned Maven.
func TestDockerfileHasTheTestImagesLayout(t *testing.T) {
	args, stages := readDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a multi-stage build", len(stages))
	}
	final := stages[len(stages)-1]
	if final.from != "scratch" {
		t.Errorf("final stage FROM %s, want scratch", final.from)
	}
	var dests []string
	var user, entrypoint string
	for _, l := range final.lines {
		f := strings.Fields(l)
		switch strings.ToUpper(f[0]) {
		case "COPY":
			dests = append(dests, f[len(f)-1])
		case "USER":
			user = f[1]
		case "ENTRYPOINT":
			entrypoint = strings.TrimSpace(strings.TrimPrefix(l, f[0]))
		case "LABEL":
		default:
			t.Errorf("final stage: unexpected %q", l)
		}
	}
	want := []string{testimages.OperatorBinary().Path, testimages.JMXAttachPath, testimages.AgentJarPath}
	for _, b := range testimages.DefaultAgentBinaries() {
		if !slices.Contains(want, b.Path) {
			want = append(want, b.Path)
		}
	}
	slices.Sort(dests)
	slices.Sort(want)
	if !slices.Equal(dests, want) {
		t.Errorf("the final image holds %v, the test image %v", dests, want)
	}
	if entrypoint != `["`+testimages.JMXAttachPath+`"]` {
		t.Errorf("ENTRYPOINT %s, want [%q] as the test image", entrypoint, testimages.JMXAttachPath)
	}
	if !regexp.MustCompile(`^[1-9][0-9]*:[1-9][0-9]*$`).MatchString(user) {
		t.Errorf("USER %q, want a numeric non-root uid:gid", user)
	}

	all := ""
	for _, s := range stages[:len(stages)-1] {
		all += strings.Join(s.lines, "\n") + "\n"
	}
	for _, cmd := range []string{"./cmd/prometheus-jmx-exporter-operator", "./cmd/jmx-attach"} {
		if !regexp.MustCompile(`CGO_ENABLED=0 go build .*` + regexp.QuoteMeta(cmd)).MatchString(all) {
			t.Errorf("no static (CGO_ENABLED=0) build of %s", cmd)
		}
	}
	// The java agent is the project's own, built from agent/ with Maven (as make agent and the tests build it),
	// in a Maven image pinned by tag; the pom pins everything else.
	var agentStage *dockerfileStage
	for i := range stages[:len(stages)-1] {
		if strings.HasPrefix(stages[i].from, "maven:") {
			agentStage = &stages[i]
		}
	}
	if agentStage == nil {
		t.Fatalf("no Maven stage builds the agent")
	}
	tag := strings.TrimPrefix(agentStage.from, "maven:")
	if v, ok := strings.CutPrefix(tag, "${"); ok {
		tag = args[strings.TrimSuffix(v, "}")]
	}
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+-`).MatchString(tag) {
		t.Errorf("Maven image tag %q is not pinned to a release", tag)
	}
	agentLines := strings.Join(agentStage.lines, "\n")
	for _, s := range []string{"COPY agent/pom.xml", "COPY agent/src/", "mvn -q -B package"} {
		if !strings.Contains(agentLines, s) {
			t.Errorf("the agent stage lacks %q", s)
		}
	}
	// The build context admits what the Maven stage copies.
	ignore, err := os.ReadFile(filepath.Join(repo, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"!agent/pom.xml", "!agent/src/"} {
		if !slices.Contains(strings.Split(string(ignore), "\n"), p) {
			t.Errorf(".dockerignore lacks %q: the agent stage would find no sources", p)
		}
	}
	if strings.Contains(all, "jmx_exporter/releases/download") {
		t.Errorf("the Dockerfile still downloads the upstream agent")
	}

	d := deployment(t, "deploy/operator")
	if cmd := d.Spec.Template.Spec.Containers[0].Command; len(cmd) == 0 || cmd[0] != testimages.OperatorBinary().Path {
		t.Errorf("operator.yaml runs %v, the image holds the operator at %s", cmd, testimages.OperatorBinary().Path)
	}
}

// TestMakeImageFailsClearlyWithoutDocker: with no Docker engine, make image
// stops before building and says why.
func TestMakeImageFailsClearlyWithoutDocker(t *testing.T) {
	cmd := exec.Command("make", "-s", "image", "DOCKER=false")
	cmd.Dir = repo
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err == nil {
		t.Fatalf("make image succeeded without an engine:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "no Docker engine") {
		t.Errorf("make image failed without saying why:\n%s", out.String())
	}
}
