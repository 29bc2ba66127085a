package testimages

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// outsideMain is an operator author's program that builds the agent image
// through the public API, with handlerkit's jmx-attach and a command of
// its own.
const outsideMain = `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/handlerkit/handlerkit/pkg/images/testimages"
)

func main() {
	bins := append(testimages.DefaultAgentBinaries(),
		testimages.Binary{Package: "example.com/operator/cmd/hello", Path: "/usr/local/bin/hello"})
	a, err := testimages.BuildAgent(context.Background(), os.Args[1], os.Args[2], bins)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Print(a.File)
}
`

// goIn runs the go tool in dir with env added to the test's environment,
// minus GOFLAGS, failing the test on an error.
func goIn(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(withoutGOFLAGS(os.Environ()), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

func withoutGOFLAGS(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GOFLAGS=") {
			out = append(out, kv)
		}
	}
	return out
}

func TestBuildAgentWorksFromAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module and two commands")
	}
	root := strings.TrimSpace(goIn(t, ".", nil, "list", "-m", "-f", "{{.Dir}}", modulePath))
	// An operator author's module: it requires handlerkit (here through a
	// replace directive), and its go.sum holds only what its own packages
	// need, as `go mod tidy` leaves it, not what handlerkit's commands need.
	mod := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		p := filepath.Join(mod, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/operator\n\ngo 1.26.0\n\nrequire "+modulePath+" v0.0.0\n\nreplace "+modulePath+" => "+root+"\n")
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sum))
	write("main.go", outsideMain)
	write("cmd/hello/main.go", "package main\n\nfunc main() {}\n")
	// From the module cache only; -e because tidy also looks up the
	// dependencies of dependencies' tests, which the cache need not hold.
	offline := []string{"GOPROXY=off", "GOWORK=off"}
	goIn(t, mod, append(offline, "GOFLAGS=-mod=mod"), "mod", "tidy", "-e")
	goIn(t, mod, offline, "build", "-o", "operator-images", ".")

	out := t.TempDir()
	jar := filepath.Join(out, "agent.jar")
	if err := os.WriteFile(jar, []byte("PK fake jar"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Run where an author would: in their module, with the go tool's
	// defaults (-mod=readonly).
	cmd := exec.Command(filepath.Join(mod, "operator-images"), out, jar)
	cmd.Dir = mod
	cmd.Env = append(withoutGOFLAGS(os.Environ()), offline...)
	file, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("BuildAgent from another module: %v\n%s", err, stderr)
	}
	files, entrypoint := archiveFiles(t, Archive{Ref: AgentRef, File: string(file)})
	for _, p := range []string{JMXAttachPath, "/usr/local/bin/hello"} {
		if h := files[p]; h == nil || h.Mode&0o111 == 0 {
			t.Errorf("binary missing or not executable at %s: %+v", p, h)
		}
	}
	if files[AgentJarPath] == nil {
		t.Errorf("agent jar missing at %s", AgentJarPath)
	}
	if len(entrypoint) != 1 || entrypoint[0] != JMXAttachPath {
		t.Errorf("entrypoint %q, want jmx-attach", entrypoint)
	}
}
