package testbuild

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/handlerkit/handlerkit/internal/cachedir"
)

// EnvCache names the directory under which Build keeps its binaries between
// runs, one subdirectory per build. Unset, it is
// ${XDG_CACHE_HOME:-$HOME/.cache}/handlerkit/testbuild.
const EnvCache = "HANDLERKIT_TESTBUILD_CACHE"

// ReleaseFlags and ReleaseEnv are how the shipped binaries are built (the
// Dockerfile, make build): static and trimmed. Tests that run a command as it
// ships build it with these, and then share the compiled packages with the
// images' binaries (pkg/images/testimages) instead of compiling the
// command's whole dependency graph once more with cgo and full paths.
var (
	ReleaseFlags = []string{"-trimpath", "-ldflags=-s -w"}
	ReleaseEnv   = []string{"CGO_ENABLED=0"}
)

// lockPoll is how often Build tries again for a kept directory that another
// build holds.
const lockPoll = 100 * time.Millisecond

// Build builds the main packages that pkgs (go build's patterns) match, as
// `go build <flags> -o DIR/ <pkgs>` run in moduleDir ("" for the current
// directory) with the caller's environment plus extraEnv, and puts each
// binary into outDir (created if missing) under the name go build gives it
// there. It returns their paths, in `go list`'s order. Patterns that match no
// main package are an error; so is a failed build, whose error holds go
// build's output. Cancelling ctx stops the build.
//
// DIR is a directory kept between runs, chosen by the module path that
// moduleDir's go.mod declares (not its location, so clones elsewhere share
// it), pkgs, flags, extraEnv and the target GOOS/GOARCH, under EnvCache's
// directory. go build skips the link of a binary when the one already in DIR
// carries the build ID it would link, which spares a warm run seconds of
// CPU per binary (a temporary DIR links every time). A relinked binary
// replaces the old file (go build renames or removes it, never writes into
// it), so the copies in outDir, which are hard links (copies across
// filesystems), keep what they were built as. Build holds an exclusive lock
// on DIR from the build to the last link, so two builds of different sources
// (concurrent runs at different commits) each get their own binaries. When
// DIR cannot be created or locked, Build builds straight into outDir.
//
// DIR may hold binaries of main packages that pkgs no longer match; Build
// never hands them out.
func Build(ctx context.Context, moduleDir, outDir string, flags, extraEnv []string, pkgs ...string) ([]string, error) {
	if len(pkgs) == 0 {
		return nil, errors.New("testbuild: no packages to build")
	}
	env := append(os.Environ(), extraEnv...)
	target, err := listMain(ctx, moduleDir, env, flags, pkgs)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("testbuild: %w", err)
	}
	kept, unlock, err := keep(ctx, moduleDir, flags, extraEnv, pkgs, target)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("testbuild: %w", ctx.Err())
		}
		kept = "" // no kept directory: build straight into outDir
	} else {
		defer unlock()
	}
	buildDir := kept
	if kept == "" {
		buildDir = outDir
	}
	if err := goBuild(ctx, moduleDir, buildDir, env, flags, pkgs); err != nil {
		return nil, err
	}
	paths := make([]string, len(target.names))
	for i, name := range target.names {
		paths[i] = filepath.Join(outDir, name)
		if kept == "" {
			continue
		}
		if err := linkOrCopy(filepath.Join(kept, name), paths[i]); err != nil {
			return nil, fmt.Errorf("testbuild: %w", err)
		}
	}
	return paths, nil
}

// mainTargets are the file names of the binaries that patterns build and
// the platform they are built for.
type mainTargets struct {
	names        []string
	goos, goarch string
}

// listMain asks go list which main packages pkgs match (without loading
// their dependencies: a tenth of a CPU second) and names their binaries as
// go build -o DIR/ does.
func listMain(ctx context.Context, moduleDir string, env, flags, pkgs []string) (mainTargets, error) {
	args := append([]string{"list", "-find"}, flags...)
	args = append(args, "-f", `{{context.GOOS}} {{context.GOARCH}} {{.Name}} {{.ImportPath}}`)
	args = append(args, pkgs...)
	cmd := goCmd(ctx, moduleDir, env, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return mainTargets{}, fmt.Errorf("testbuild: go list %s in %s: %w\n%s",
			strings.Join(pkgs, " "), dirName(moduleDir), err, stderr.Bytes())
	}
	var t mainTargets
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) != 4 {
			return mainTargets{}, fmt.Errorf("testbuild: go list printed %q", line)
		}
		t.goos, t.goarch = f[0], f[1]
		if f[2] == "main" {
			t.names = append(t.names, execName(f[3], t.goos))
		}
	}
	if len(t.names) == 0 {
		return mainTargets{}, fmt.Errorf("testbuild: %s in %s: no main package", strings.Join(pkgs, " "), dirName(moduleDir))
	}
	return t, nil
}

// execName is the file name go build gives the binary of importPath in an
// output directory: the path's last element, or the one before a major
// version suffix (example.com/cmd/v2 is cmd), with .exe on Windows.
func execName(importPath, goos string) string {
	name := path.Base(importPath)
	if name != importPath && isMajorVersion(name) {
		name = path.Base(path.Dir(importPath))
	}
	if goos == "windows" {
		name += ".exe"
	}
	return name
}

// isMajorVersion reports whether elem is a module path's major version
// suffix, v2 or above.
func isMajorVersion(elem string) bool {
	if len(elem) < 2 || elem[0] != 'v' || elem[1] == '0' || elem == "v1" {
		return false
	}
	for _, c := range elem[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// keep creates and locks the kept directory of a build; unlock releases it.
func keep(ctx context.Context, moduleDir string, flags, extraEnv, pkgs []string, t mainTargets) (
	dir string, unlock func(), err error,
) {
	base := os.Getenv(EnvCache)
	if base == "" {
		if base, err = cachedir.Dir("testbuild"); err != nil {
			return "", nil, err
		}
	}
	mod, err := modulePath(moduleDir)
	if err != nil {
		return "", nil, err
	}
	dir = filepath.Join(base, key(mod, pkgs, flags, extraEnv, t.goos, t.goarch))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	unlock, err = lock(ctx, filepath.Join(dir, ".lock"))
	if err != nil {
		return "", nil, err
	}
	return dir, unlock, nil
}

// key names a kept directory: a short hash of what tells builds apart.
func key(module string, pkgs, flags, extraEnv []string, goos, goarch string) string {
	h := sha256.New()
	field := func(s string) { fmt.Fprintf(h, "%d:%s;", len(s), s) }
	list := func(name string, l []string) {
		field(name)
		fmt.Fprintf(h, "%d;", len(l))
		for _, s := range l {
			field(s)
		}
	}
	field(module)
	list("pkgs", pkgs)
	list("flags", flags)
	list("env", extraEnv)
	field(goos)
	field(goarch)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// modulePath returns the module path that the go.mod of dir (or of the
// nearest directory above it) declares, or dir's absolute path when there is
// none.
func modulePath(dir string) (string, error) {
	abs, err := filepath.Abs(dirName(dir))
	if err != nil {
		return "", err
	}
	for d := abs; ; {
		data, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil {
			if mod := moduleLine(data); mod != "" {
				return mod, nil
			}
			return abs, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return abs, nil
		}
		d = parent
	}
}

// moduleLine returns the path of go.mod's module directive ("" when it has
// none).
func moduleLine(gomod []byte) string {
	s := bufio.NewScanner(bytes.NewReader(gomod))
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		rest, ok := strings.CutPrefix(line, "module")
		if !ok || rest == "" || !strings.ContainsAny(rest[:1], " \t\"`") {
			continue
		}
		rest, _, _ = strings.Cut(rest, "//")
		rest = strings.TrimSpace(rest)
		if unquoted, err := strconv.Unquote(rest); err == nil {
			rest = unquoted
		}
		return rest
	}
	return ""
}

// lock takes an exclusive flock on file, waiting (as long as ctx lets it)
// while another process or another Build of this one holds it.
func lock(ctx context.Context, file string) (unlock func(), err error) {
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("flock %s: %w", file, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}

// goBuild runs go build of pkgs into dir, a directory.
func goBuild(ctx context.Context, moduleDir, dir string, env, flags, pkgs []string) error {
	args := append([]string{"build"}, flags...)
	args = append(args, "-o", dir+string(filepath.Separator))
	cmd := goCmd(ctx, moduleDir, env, append(args, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("testbuild: go %s in %s: %w\n%s",
			strings.Join(cmd.Args[1:], " "), dirName(moduleDir), err, out)
	}
	return nil
}

// goCmd is the go command with args, run in dir with env.
func goCmd(ctx context.Context, dir string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	// A child the go command left holding its output open must not hold
	// up a cancelled build.
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// dirName is dir for messages and lookups ("" is the current directory).
func dirName(dir string) string {
	if dir == "" {
		return "."
	}
	return dir
}

// linkOrCopy makes dst a hard link of src, or a copy when linking fails
// (across filesystems), replacing a file already at dst.
func linkOrCopy(src, dst string) error {
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if os.Link(src, dst) == nil {
		return nil
	}
	return copyFile(src, dst)
}

// copyFile copies src, with its permissions, to a new file dst.
func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	_, err = io.Copy(out, in)
	return err
}
