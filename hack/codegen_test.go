package hack

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// generatedDirs are the directories hack/update-codegen.sh writes; the
// verification must leave them as it found them.
var generatedDirs = []string{"pkg/apis", "pkg/generated", "deploy/crds",
	"examples/memcached-operator/pkg/apis", "examples/memcached-operator/pkg/generated", "examples/memcached-operator/deploy/crds"}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("%s is not the repository root: %v", root, err)
	}
	return root
}

// treeDigest hashes the names, modes and contents of every file under dirs.
func treeDigest(t *testing.T, root string, dirs ...string) string {
	t.Helper()
	h := sha256.New()
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			h.Write([]byte(rel + "\x00" + info.Mode().String() + "\x00"))
			if d.Type().IsRegular() {
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				h.Write(data)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("hashing %s: %v", dir, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func runVerify(t *testing.T, root string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "hack", "verify-codegen.sh"))
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.String(), err
}

// probeDoc is a types package that a developer added without running `make
// codegen`: deepcopy-gen must give it a zz_generated.deepcopy.go, and nothing
// else (no +groupName, no +genclient, no CRD markers), so that the file it
// adds is the only change it can cause.
const probeDoc = `// Package v1 is an API package added without regenerating.
//
// +k8s:deepcopy-gen=package
package v1

// Probe is a type whose deepcopy functions are not committed.
type Probe struct {
	Names []string
}
`

// TestCommittedGeneratedCodeIsFreshAndStalenessIsCaught is the check CI
// relies on, with one regeneration of both API roots (the main API and the
// memcached example's) instead of one per scenario.
//
// It runs hack/verify-codegen.sh on a copy of the repository in which, as a
// developer who forgot `make codegen` would have left it, each API root has a
// types package without its generated code and a committed CRD whose
// validation maximum no longer matches its marker. Verification must fail
// with a diff that shows exactly these four changes and nothing else, and
// leave the copy as it was. That one run proves what two runs proved before:
//   - committed generated code is fresh (formerly
//     TestCommittedGeneratedCodeIsFresh, a run on the working tree): every
//     committed file that the copy leaves untouched appears in no hunk, so it
//     is byte-equal to what the generators produce from the committed types;
//     the two CRD lines the copy changes are byte-checked too, because the
//     generated side of their hunk must be the committed line;
//   - a stale tree fails with a diff naming both API roots (formerly
//     TestVerifyCodegenFailsWhenTypesChangedWithoutRegenerating, which
//     changed a marker in each root's types.go): the new types packages show
//     that the generators read the types of the tree being verified, the CRD
//     hunks that a changed line shows as a - and + pair;
//   - verification never writes to the tree it verifies (both former tests):
//     the copy's generated directories hash the same before and after. The
//     working tree itself is only read, by the copy below.
func TestCommittedGeneratedCodeIsFreshAndStalenessIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("regenerates all code (about half a minute); skipped with -short")
	}
	root := repoRoot(t)
	copyRoot := t.TempDir()
	for _, rel := range append([]string{"go.mod", "go.sum", "hack/update-codegen.sh", "hack/verify-codegen.sh", "hack/boilerplate.go.txt"}, generatedDirs...) {
		copyPath(t, filepath.Join(root, rel), filepath.Join(copyRoot, rel))
	}
	const (
		mainCRD    = "deploy/crds/jmx.handlerkit.dev_prometheusjmxexporters.yaml"
		exampleCRD = "examples/memcached-operator/deploy/crds/cache.example.handlerkit.dev_memcacheds.yaml"
		mainProbe  = "pkg/apis/codegenprobe/v1/zz_generated.deepcopy.go"
		exProbe    = "examples/memcached-operator/pkg/apis/codegenprobe/v1/zz_generated.deepcopy.go"
	)
	// The markers these lines come from must still say so; otherwise the
	// edits below no longer stand for a forgotten regeneration.
	requireContains(t, filepath.Join(root, "pkg/apis/jmx/v1alpha1/types.go"), "+kubebuilder:validation:Maximum=65535")
	requireContains(t, filepath.Join(root, "examples/memcached-operator/pkg/apis/cache/v1alpha1/types.go"), "+kubebuilder:validation:Maximum=100")
	editMarker(t, filepath.Join(copyRoot, mainCRD), "                maximum: 65535\n", "                maximum: 65000\n")
	editMarker(t, filepath.Join(copyRoot, exampleCRD), "                maximum: 100\n", "                maximum: 99\n")
	for _, dir := range []string{"pkg/apis/codegenprobe/v1", "examples/memcached-operator/pkg/apis/codegenprobe/v1"} {
		if err := os.MkdirAll(filepath.Join(copyRoot, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(copyRoot, dir, "doc.go"), []byte(probeDoc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := treeDigest(t, copyRoot, generatedDirs...)

	out, err := runVerify(t, copyRoot)
	if err == nil {
		t.Fatalf("verification passed although the copy is stale:\n%s", out)
	}
	if _, ok := err.(*exec.ExitError); !ok {
		t.Fatalf("verification did not run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "run 'make codegen'") {
		t.Errorf("output lacks the advice to run 'make codegen':\n%s", out)
	}
	changed := diffChanges(out)
	want := map[string][]string{
		mainCRD:    {"-                maximum: 65000", "+                maximum: 65535"},
		exampleCRD: {"-                maximum: 99", "+                maximum: 100"},
	}
	for file, lines := range want {
		if got := changed[file]; !slices.Equal(got, lines) {
			t.Errorf("diff of %s: got %q, want %q (committed code is stale: run 'make codegen' and commit the result)", file, got, lines)
		}
	}
	for _, file := range []string{mainProbe, exProbe} {
		got := strings.Join(changed[file], "\n")
		if !strings.Contains(got, "+func (in *Probe) DeepCopy() *Probe {") {
			t.Errorf("diff lacks the new %s with Probe's deepcopy functions:\n%s", file, got)
		}
		for _, line := range changed[file] {
			if !strings.HasPrefix(line, "+") {
				t.Errorf("%s, which the copy lacks, has a removed line %q", file, line)
			}
		}
	}
	for file, lines := range changed {
		if _, ok := want[file]; ok || file == mainProbe || file == exProbe {
			continue
		}
		t.Errorf("committed generated code is stale: run 'make codegen' and commit the result. %s differs:\n%s", file, strings.Join(lines, "\n"))
	}
	if after := treeDigest(t, copyRoot, generatedDirs...); after != before {
		t.Error("verification of a stale tree modified it")
	}
	if t.Failed() {
		t.Logf("hack/verify-codegen.sh output:\n%s", out)
	}
}

// diffChanges reads verify-codegen.sh's unified diffs ("diff -ruN a/F b/F"
// headers) and returns, per file F, its removed and added lines in order.
func diffChanges(out string) map[string][]string {
	changes := map[string][]string{}
	file := ""
	header := 0 // the ---/+++ lines that follow a "diff" line
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "diff -ruN a/"); ok {
			file, _, _ = strings.Cut(rest, " ")
			header = 2
			changes[file] = nil
			continue
		}
		if header > 0 && (strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "+++ ")) {
			header--
			continue
		}
		header = 0
		if file != "" && (strings.HasPrefix(line, "-") || strings.HasPrefix(line, "+")) {
			changes[file] = append(changes[file], line)
		}
	}
	return changes
}

// requireContains fails the test when file lacks s.
func requireContains(t *testing.T, file, s string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(s)) {
		t.Fatalf("%s no longer has %q; update this test", file, s)
	}
}

// editMarker replaces the first from in the file with to.
func editMarker(t *testing.T, file, from, to string) {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(src, []byte(from)) {
		t.Fatalf("%s no longer has %q; update this test", file, from)
	}
	src = bytes.Replace(src, []byte(from), []byte(to), 1)
	if err := os.WriteFile(file, src, 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyPath copies a file or a directory tree, keeping file modes so that the
// scripts stay executable.
func copyPath(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		target := filepath.Join(to, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.WriteFile(target, data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatalf("copying %s: %v", from, err)
	}
}
