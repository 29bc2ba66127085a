package testimages

import (
	"archive/zip"
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/handlerkit/handlerkit/pkg/images"
)

// JavaHome is where Debian's openjdk-17-jre-headless lives, in both JVM images.
const JavaHome = "/usr/lib/jvm/java-17-openjdk-amd64"

// AppDir is where the sample application's jar goes in both JVM images.
const AppDir = "/app"

// EnvDebianMirror overrides the Debian mirror debootstrap downloads from.
const EnvDebianMirror = "HANDLERKIT_DEBIAN_MIRROR"

// rootfsName names the cached root filesystem; change it when the package
// list changes so that old caches are not reused.
const rootfsName = "bookworm-minbase-openjdk17-v1"

// JavaApp is a compiled Java application to put into a JVM image.
type JavaApp struct {
	// Jar is the application jar on the host.
	Jar string
	// MainClass is the class the image runs.
	MainClass string
}

// rootfsMu serialises root filesystem builds within a process; the rename
// into place keeps concurrent processes from seeing half-built trees.
var rootfsMu sync.Mutex

// JVMRootfs returns a Debian bookworm minbase root filesystem with
// openjdk-17-jre-headless, and a gzip layer tarball of it, building both
// into cacheDir with debootstrap the first time (about 40 s and 350 MB).
// It needs root and the debootstrap package.
func JVMRootfs(ctx context.Context, cacheDir string) (dir, layer string, err error) {
	unlock, err := lockRootfsCache(cacheDir)
	if err != nil {
		return "", "", err
	}
	defer unlock()
	dir = filepath.Join(cacheDir, "rootfs", rootfsName)
	layer = dir + ".tar.gz"
	if _, err := os.Stat(layer); err == nil {
		return dir, layer, nil
	}
	if _, err := os.Stat(filepath.Join(dir, JavaHome, "bin", "java")); err != nil {
		if err := debootstrap(ctx, dir, "openjdk-17-jre-headless"); err != nil {
			return "", "", err
		}
	}
	if err := images.WriteDirTarball(dir, layer); err != nil {
		return "", "", err
	}
	return dir, layer, nil
}

// lockRootfsCache takes the root filesystem cache for this process and,
// through a lock file, from test binaries of other packages that may build
// it at the same time. The returned function gives it back.
func lockRootfsCache(cacheDir string) (unlock func(), err error) {
	rootfsMu.Lock()
	if err := os.MkdirAll(filepath.Join(cacheDir, "rootfs"), 0o755); err != nil {
		rootfsMu.Unlock()
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(cacheDir, "rootfs", ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		rootfsMu.Unlock()
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		rootfsMu.Unlock()
		return nil, fmt.Errorf("testimages: locking the rootfs cache: %w", err)
	}
	return func() {
		lock.Close() // closing the file releases the flock
		rootfsMu.Unlock()
	}, nil
}

// debootstrap builds a Debian bookworm minbase root filesystem with the
// packages in include (comma-separated) into dir, through dir.tmp so that a
// half-built tree is never found under dir.
func debootstrap(ctx context.Context, dir, include string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("testimages: debootstrap needs root to build the %s root filesystem", include)
	}
	bin, err := exec.LookPath("debootstrap")
	if err != nil {
		return fmt.Errorf("testimages: debootstrap not found (apt-get install debootstrap; make prereqs): %w", err)
	}
	mirror := os.Getenv(EnvDebianMirror)
	if mirror == "" {
		mirror = "http://deb.debian.org/debian"
	}
	tmp := dir + ".tmp"
	if err := removeTree(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, bin, "--variant=minbase", "--include="+include, "bookworm", tmp, mirror)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, runErr := cmd.CombinedOutput()
	// debootstrap mounts /proc and /sys in the target while it works and
	// may leave them behind when it fails or is killed.
	unmountUnder(tmp)
	if runErr != nil {
		return fmt.Errorf("testimages: debootstrap into %s failed: %w\n%s", tmp, runErr, lastLines(string(out), 20))
	}
	// The package cache is not needed in an image.
	os.RemoveAll(filepath.Join(tmp, "var", "cache", "apt", "archives"))
	os.MkdirAll(filepath.Join(tmp, "var", "cache", "apt", "archives", "partial"), 0o755)
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "testimages: debootstrap built %s in %s\n", dir, time.Since(start).Round(time.Second))
	return nil
}

// removeTree removes dir after unmounting anything left mounted under it.
func removeTree(dir string) error {
	unmountUnder(dir)
	return os.RemoveAll(dir)
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// archiveName names a JVM image archive after its inputs (the root
// filesystem version and the content of the application jar, not its
// timestamps), so that an archive built earlier, by `make images` or by a
// previous test run, is reused instead of rebuilt and rehashed.
func archiveName(kind string, app JavaApp) (string, error) {
	zr, err := zip.OpenReader(app.Jar)
	if err != nil {
		return "", fmt.Errorf("testimages: reading %s: %w", app.Jar, err)
	}
	defer zr.Close()
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n", rootfsName, kind, app.MainClass)
	names := make([]string, 0, len(zr.File))
	files := map[string]*zip.File{}
	for _, f := range zr.File {
		names = append(names, f.Name)
		files[f.Name] = f
	}
	sort.Strings(names)
	for _, n := range names {
		rc, err := files[n].Open()
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\n", n)
		_, err = io.Copy(h, rc)
		rc.Close()
		if err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%s-%x.tar", kind, h.Sum(nil)[:8]), nil
}

// cached returns the archive named name in dir when it was built before.
func cached(dir, name, ref string) (Archive, bool) {
	file := filepath.Join(dir, name)
	if info, err := os.Stat(file); err == nil && info.Size() > 0 {
		return Archive{Ref: ref, File: file}, true
	}
	return Archive{}, false
}

func appLayer(app JavaApp) (v1.Layer, []string, error) {
	if app.Jar == "" || app.MainClass == "" {
		return nil, nil, fmt.Errorf("testimages: a Java app needs a jar and a main class")
	}
	jar := AppDir + "/" + filepath.Base(app.Jar)
	layer, err := images.FilesLayer(images.File{Path: jar, Source: app.Jar, Mode: 0o644})
	if err != nil {
		return nil, nil, err
	}
	return layer, []string{JavaHome + "/bin/java", "-cp", jar, app.MainClass}, nil
}

// BuildJVMApp writes the JVM application image (JVMAppRef) into dir, or
// returns the archive an earlier build with the same inputs left there: the
// cached Debian root filesystem with the JRE, plus app.
func BuildJVMApp(ctx context.Context, dir, cacheDir string, app JavaApp) (Archive, error) {
	return buildJVMImage(ctx, dir, cacheDir, app, jvmImage{name: "jvm-app", ref: JVMAppRef, javaHome: JavaHome})
}

// BuildShelllessJVM writes the shell-less JVM image (ShelllessJVMRef) into
// dir, or returns the archive an earlier build with the same inputs left
// there: only the JRE from the cached root filesystem, the shared libraries it
// links, a writable /tmp (where the JVM keeps its attach files) and app. Like
// a distroless java image it has no shell, no coreutils and no JDK tools.
func BuildShelllessJVM(ctx context.Context, dir, cacheDir string, app JavaApp) (Archive, error) {
	name, err := archiveName("jvm-app-shellless", app)
	if err != nil {
		return Archive{}, err
	}
	if a, ok := cached(dir, name, ShelllessJVMRef); ok {
		return a, nil
	}
	rootfs, _, err := JVMRootfs(ctx, cacheDir)
	if err != nil {
		return Archive{}, err
	}
	slim, err := os.MkdirTemp(dir, ".slim-")
	if err != nil {
		return Archive{}, err
	}
	defer os.RemoveAll(slim)
	if err := slimRoot(rootfs, slim, JavaHome); err != nil {
		return Archive{}, err
	}
	if err := os.Mkdir(filepath.Join(slim, "tmp"), 0o777); err != nil {
		return Archive{}, err
	}
	if err := os.Chmod(filepath.Join(slim, "tmp"), 0o777|os.ModeSticky); err != nil {
		return Archive{}, err
	}
	etc := filepath.Join(slim, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return Archive{}, err
	}
	// The JVM looks its user up for user.home; give it root and nobody.
	passwd := "root:x:0:0:root:/root:/nonexistent\nnobody:x:65534:65534:nobody:/nonexistent:/nonexistent\n"
	if err := os.WriteFile(filepath.Join(etc, "passwd"), []byte(passwd), 0o644); err != nil {
		return Archive{}, err
	}
	if err := os.WriteFile(filepath.Join(etc, "group"), []byte("root:x:0:\nnogroup:x:65534:\n"), 0o644); err != nil {
		return Archive{}, err
	}
	base, err := images.DirLayer(slim, dir)
	if err != nil {
		return Archive{}, err
	}
	top, cmd, err := appLayer(app)
	if err != nil {
		return Archive{}, err
	}
	archive, err := writeImage(dir, name, images.Spec{
		Ref:        ShelllessJVMRef,
		Layers:     []v1.Layer{base, top},
		Cmd:        cmd,
		Env:        []string{"JAVA_HOME=" + JavaHome},
		WorkingDir: AppDir,
	})
	removeLayerTemps(dir)
	return archive, err
}

// removeLayerTemps deletes the temporary layer files DirLayer left in dir
// once the archive that copied them is written.
func removeLayerTemps(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "layer-*.tar"))
	for _, f := range files {
		os.Remove(f)
	}
}
