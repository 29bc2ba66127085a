package hack

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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

// TestCommittedGeneratedCodeIsFresh is the check CI relies on: regenerating
// from the types must reproduce the committed deepcopy, register, client and
// CRD files byte for byte, without touching the working tree.
func TestCommittedGeneratedCodeIsFresh(t *testing.T) {
	if testing.Short() {
		t.Skip("regenerates all code (about a minute); skipped with -short")
	}
	root := repoRoot(t)
	before := treeDigest(t, root, generatedDirs...)
	out, err := runVerify(t, root)
	if err != nil {
		t.Fatalf("hack/verify-codegen.sh: %v\n%s\nRun 'make codegen' and commit the result.", err, out)
	}
	if after := treeDigest(t, root, generatedDirs...); after != before {
		t.Error("hack/verify-codegen.sh modified the working tree")
	}
}

// TestVerifyCodegenFailsWhenTypesChangedWithoutRegenerating edits a
// validation marker of the main API and one of the memcached example's in a
// copy of the repository, as a developer who forgot `make codegen` would,
// and expects verification to fail with a diff that shows both changes,
// leaving the stale copy as it was.
func TestVerifyCodegenFailsWhenTypesChangedWithoutRegenerating(t *testing.T) {
	if testing.Short() {
		t.Skip("regenerates all code (about a minute); skipped with -short")
	}
	root := repoRoot(t)
	copyRoot := t.TempDir()
	for _, rel := range append([]string{"go.mod", "go.sum", "hack/update-codegen.sh", "hack/verify-codegen.sh", "hack/boilerplate.go.txt"}, generatedDirs...) {
		copyPath(t, filepath.Join(root, rel), filepath.Join(copyRoot, rel))
	}
	// One marker in each API root, so that one regeneration shows that
	// both the main API and the memcached example's are checked.
	editMarker(t, filepath.Join(copyRoot, "pkg/apis/jmx/v1alpha1/types.go"),
		"+kubebuilder:validation:Maximum=65535", "+kubebuilder:validation:Maximum=65000")
	editMarker(t, filepath.Join(copyRoot, "examples/memcached-operator/pkg/apis/cache/v1alpha1/types.go"),
		"+kubebuilder:validation:Maximum=100", "+kubebuilder:validation:Maximum=99")
	before := treeDigest(t, copyRoot, generatedDirs...)

	out, err := runVerify(t, copyRoot)
	if err == nil {
		t.Fatalf("verification passed although types.go changed:\n%s", out)
	}
	if _, ok := err.(*exec.ExitError); !ok {
		t.Fatalf("verification did not run: %v\n%s", err, out)
	}
	for _, want := range []string{
		"a/deploy/crds/jmx.handlerkit.dev_prometheusjmxexporters.yaml",
		"-                maximum: 65535",
		"+                maximum: 65000",
		"a/examples/memcached-operator/deploy/crds/cache.example.handlerkit.dev_memcacheds.yaml",
		"-                maximum: 100",
		"+                maximum: 99",
		"run 'make codegen'",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if after := treeDigest(t, copyRoot, generatedDirs...); after != before {
		t.Error("verification of a stale tree modified it")
	}
}

// editMarker replaces the marker from with to in the types file, as a
// developer changing the API would.
func editMarker(t *testing.T, types, from, to string) {
	t.Helper()
	src, err := os.ReadFile(types)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(src, []byte(from)) {
		t.Fatalf("%s no longer has %q; update this test", types, from)
	}
	src = bytes.Replace(src, []byte(from), []byte(to), 1)
	if err := os.WriteFile(types, src, 0o644); err != nil {
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
