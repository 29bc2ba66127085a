package testbuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestFlagsAreThoseOfThisBinary: Flags names -race and -trimpath exactly
// when this test binary was built with them (make test builds it with both).
func TestFlagsAreThoseOfThisBinary(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info in the test binary")
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	got := Flags()
	for _, flag := range []string{"-race", "-trimpath"} {
		if want := settings[flag] == "true"; slices.Contains(got, flag) != want {
			t.Errorf("Flags() = %q; built with %s: %v", got, flag, want)
		}
	}
	t.Logf("built with %q", got)
}

// writeModule writes a module named modPath into dir (a new temporary
// directory when dir is ""), with files (path: content) beside its go.mod,
// and returns dir.
func writeModule(t *testing.T, dir, modPath string, files map[string]string) string {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	files["go.mod"] = "module " + modPath + "\n\ngo 1.26\n"
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// printer is a main package that prints text.
func printer(text string) string {
	return "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(" + strconv.Quote(text) + ") }\n"
}

// output runs the binary and returns what it printed, trimmed.
func output(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	return strings.TrimSpace(string(out))
}

// inode returns the inode number of file.
func inode(t *testing.T, file string) uint64 {
	t.Helper()
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// keptFiles returns the files named name in the kept directories under cache.
func keptFiles(t *testing.T, cache, name string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cache, "*", name))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestBuildSkipsTheLinkOfAnUpToDateBinary: a second Build of unchanged
// sources leaves the kept binary as it is (same file: go build relinks into
// a new one) and hands out that binary; after a change, Build hands out the
// new binary, and the copy handed out before still runs the old one.
func TestBuildSkipsTheLinkOfAnUpToDateBinary(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(EnvCache, cache)
	mod := writeModule(t, "", "example.com/hello", map[string]string{"main.go": printer("X")})

	out1 := t.TempDir()
	paths, err := Build(t.Context(), mod, out1, nil, nil, ".")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(out1, "hello")}; !slices.Equal(paths, want) {
		t.Fatalf("Build returned %q, want %q", paths, want)
	}
	if got := output(t, paths[0]); got != "X" {
		t.Fatalf("first build prints %q, want X", got)
	}
	kept := keptFiles(t, cache, "hello")
	if len(kept) != 1 {
		t.Fatalf("kept binaries %q, want one", kept)
	}
	before := inode(t, kept[0])

	out2 := t.TempDir()
	if _, err := Build(t.Context(), mod, out2, nil, nil, "."); err != nil {
		t.Fatal(err)
	}
	if after := inode(t, kept[0]); after != before {
		t.Fatalf("unchanged sources: the kept binary was linked again (inode %d, was %d)", after, before)
	}
	if got := inode(t, filepath.Join(out2, "hello")); got != before {
		t.Errorf("the second copy is inode %d, not a hard link of the kept binary (%d)", got, before)
	}
	if got := output(t, filepath.Join(out2, "hello")); got != "X" {
		t.Fatalf("second build prints %q, want X", got)
	}

	writeModule(t, mod, "example.com/hello", map[string]string{"main.go": printer("Y")})
	out3 := t.TempDir()
	if _, err := Build(t.Context(), mod, out3, nil, nil, "."); err != nil {
		t.Fatal(err)
	}
	if after := inode(t, kept[0]); after == before {
		t.Errorf("changed sources: the kept binary is still inode %d", after)
	}
	if got := output(t, filepath.Join(out3, "hello")); got != "Y" {
		t.Errorf("build after the change prints %q, want Y", got)
	}
	if got := output(t, filepath.Join(out1, "hello")); got != "X" {
		t.Errorf("the copy handed out before the change prints %q, want X: the rebuild wrote into it", got)
	}
}

// TestConcurrentBuildsOfOneModuleGetTheirOwnBinaries: two checkouts of one
// module path at different sources share a kept directory; built at the
// same time, each gets the binary of its own sources.
func TestConcurrentBuildsOfOneModuleGetTheirOwnBinaries(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(EnvCache, cache)
	texts := []string{"A", "B"}
	mods := make([]string, len(texts))
	for i, text := range texts {
		mods[i] = writeModule(t, "", "example.com/hello", map[string]string{"main.go": printer(text)})
	}
	const rounds = 3
	errs := make(chan error, len(texts)*rounds)
	var wg sync.WaitGroup
	for i, text := range texts {
		wg.Go(func() {
			for range rounds {
				out, err := os.MkdirTemp(t.TempDir(), "out-")
				if err != nil {
					errs <- err
					return
				}
				paths, err := Build(t.Context(), mods[i], out, nil, nil, ".")
				if err != nil {
					errs <- err
					return
				}
				got, err := exec.Command(paths[0]).Output()
				if err != nil {
					errs <- err
					return
				}
				if s := strings.TrimSpace(string(got)); s != text {
					errs <- fmt.Errorf("the build of the sources that print %s got a binary that prints %s", text, s)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if kept := keptFiles(t, cache, "hello"); len(kept) != 1 {
		t.Errorf("kept binaries %q, want one: the checkouts did not share a kept directory", kept)
	}
}

// TestBuildHandsOutEveryMainPackageOfAPattern: ./cmd/... yields one binary
// per main package, named as go build names them, and nothing for a
// library.
func TestBuildHandsOutEveryMainPackageOfAPattern(t *testing.T) {
	t.Setenv(EnvCache, t.TempDir())
	mod := writeModule(t, "", "example.com/tools", map[string]string{
		"cmd/one/main.go": printer("one"),
		"cmd/two/main.go": printer("two"),
		"cmd/lib/lib.go":  "package lib\n\n// Two is 2.\nconst Two = 2\n",
	})
	out := t.TempDir()
	paths, err := Build(t.Context(), mod, out, nil, nil, "./cmd/...")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(out, "one"), filepath.Join(out, "two")}; !slices.Equal(paths, want) {
		t.Fatalf("Build returned %q, want %q", paths, want)
	}
	for _, name := range []string{"one", "two"} {
		if got := output(t, filepath.Join(out, name)); got != name {
			t.Errorf("%s prints %q", name, got)
		}
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("%s holds %d files, want the two binaries", out, len(entries))
	}
}

// TestBuildReturnsGoBuildsError: a package that does not compile, and
// patterns without a main package, are errors that say why.
func TestBuildReturnsGoBuildsError(t *testing.T) {
	t.Setenv(EnvCache, t.TempDir())
	mod := writeModule(t, "", "example.com/broken", map[string]string{
		"main.go":    "package main\n\nfunc main() { undefinedThing() }\n",
		"lib/lib.go": "package lib\n",
	})
	_, err := Build(t.Context(), mod, t.TempDir(), nil, nil, ".")
	if err == nil || !strings.Contains(err.Error(), "undefined: undefinedThing") {
		t.Errorf("building a package that does not compile: %v, want go build's message", err)
	}
	_, err = Build(t.Context(), mod, t.TempDir(), nil, nil, "./lib")
	if err == nil || !strings.Contains(err.Error(), "no main package") {
		t.Errorf("building a library: %v, want no main package", err)
	}
}

// TestBuildWithoutAKeptDirectoryBuildsIntoOutDir: when the kept directory
// cannot be created, Build still builds.
func TestBuildWithoutAKeptDirectoryBuildsIntoOutDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvCache, filepath.Join(file, "cache")) // under a file: cannot be created
	mod := writeModule(t, "", "example.com/hello", map[string]string{"main.go": printer("X")})
	paths, err := Build(t.Context(), mod, t.TempDir(), nil, nil, ".")
	if err != nil {
		t.Fatal(err)
	}
	if got := output(t, paths[0]); got != "X" {
		t.Errorf("prints %q, want X", got)
	}
}

// TestBuildWaitsForTheLockUntilCancelled: a Build that finds the kept
// directory locked waits, and gives up when its context ends.
func TestBuildWaitsForTheLockUntilCancelled(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(EnvCache, cache)
	mod := writeModule(t, "", "example.com/hello", map[string]string{"main.go": printer("X")})
	if _, err := Build(t.Context(), mod, t.TempDir(), nil, nil, "."); err != nil {
		t.Fatal(err)
	}
	kept := keptFiles(t, cache, "hello")
	if len(kept) != 1 {
		t.Fatalf("kept binaries %q, want one", kept)
	}
	unlock, err := lock(t.Context(), filepath.Join(filepath.Dir(kept[0]), ".lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = Build(ctx, mod, t.TempDir(), nil, nil, ".")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Build while another holds the lock: %v, want the context's deadline", err)
	}
}

// TestExecNameIsGoBuilds: the names go build -o DIR/ gives binaries.
func TestExecNameIsGoBuilds(t *testing.T) {
	for _, c := range []struct{ path, goos, want string }{
		{"example.com/cmd/tool", "linux", "tool"},
		{"example.com/tool/v2", "linux", "tool"},
		{"example.com/tool/v1", "linux", "v1"},
		{"example.com/tool/v2x", "linux", "v2x"},
		{"v2", "linux", "v2"},
		{"example.com/cmd/tool", "windows", "tool.exe"},
	} {
		if got := execName(c.path, c.goos); got != c.want {
			t.Errorf("execName(%q, %q) = %q, want %q", c.path, c.goos, got, c.want)
		}
	}
}

// TestModuleLineReadsGoMod: the module directive, bare, quoted or commented.
func TestModuleLineReadsGoMod(t *testing.T) {
	for gomod, want := range map[string]string{
		"module example.com/a\n\ngo 1.26\n":        "example.com/a",
		"// c\nmodule \"example.com/b\" // note\n": "example.com/b",
		"go 1.26\nmodule\texample.com/c\n":         "example.com/c",
		"modulex example.com/d\n":                  "",
	} {
		if got := moduleLine([]byte(gomod)); got != want {
			t.Errorf("moduleLine(%q) = %q, want %q", gomod, got, want)
		}
	}
}
