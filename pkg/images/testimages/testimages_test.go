package testimages

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// archiveFiles reads the flattened filesystem and the entrypoint of an
// image archive.
func archiveFiles(t *testing.T, a Archive) (map[string]*tar.Header, []string) {
	t.Helper()
	tag, err := name.NewTag(a.Ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(a.File, &tag)
	if err != nil {
		t.Fatalf("%s does not hold %s: %v", a.File, a.Ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, cf.Config.Entrypoint
		}
		if err != nil {
			t.Fatal(err)
		}
		out["/"+strings.TrimSuffix(h.Name, "/")] = h
	}
}

func TestAgentImageHoldsTheBinariesAndTheJarAtTheirPaths(t *testing.T) {
	dir := t.TempDir()
	jar := filepath.Join(dir, "agent.jar")
	if err := os.WriteFile(jar, []byte("PK fake jar"), 0o600); err != nil {
		t.Fatal(err)
	}
	// cmd/pause stands in for jmx-attach: any static main package will do
	// to check where binaries land.
	bins := []Binary{{Package: modulePath + "/cmd/pause", Path: JMXAttachPath}}
	a, err := BuildAgent(context.Background(), dir, jar, bins)
	if err != nil {
		t.Fatal(err)
	}
	if a.Ref != AgentRef {
		t.Fatalf("ref %s, want %s", a.Ref, AgentRef)
	}
	files, entrypoint := archiveFiles(t, a)
	if h := files[JMXAttachPath]; h == nil || h.Mode&0o111 == 0 || h.Size < 100_000 {
		t.Fatalf("binary missing or not executable at %s: %+v", JMXAttachPath, h)
	}
	if h := files[AgentJarPath]; h == nil || h.Size != int64(len("PK fake jar")) {
		t.Fatalf("agent jar missing at %s: %+v", AgentJarPath, h)
	}
	if len(entrypoint) != 1 || entrypoint[0] != JMXAttachPath {
		t.Fatalf("entrypoint %q, want jmx-attach", entrypoint)
	}
	if _, err := BuildAgent(context.Background(), dir, "", bins); err == nil {
		t.Fatal("an agent image without a jar must be an error")
	}
	if _, err := BuildAgent(context.Background(), dir, jar, nil); err == nil {
		t.Fatal("an agent image without binaries must be an error")
	}
}

func TestPauseImageIsOneStaticBinary(t *testing.T) {
	a, err := BuildPause(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files, entrypoint := archiveFiles(t, a)
	if len(entrypoint) != 1 || entrypoint[0] != "/pause" || files["/pause"] == nil {
		t.Fatalf("pause image: entrypoint %q, files %v", entrypoint, files)
	}
	if len(files) != 1 {
		t.Fatalf("the pause image should hold only /pause, got %d entries", len(files))
	}
}

// TestSlimRootRunsJavaWithoutAShell copies the host's JDK 17 the way the
// shell-less image copies Debian's JRE, and runs java from the copy in a
// chroot: every library it needs came along, and no shell did.
func TestSlimRootRunsJavaWithoutAShell(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("chroot needs root, and CI runs as root")
		}
		t.Skip("chroot needs root")
	}
	if _, err := os.Stat(filepath.Join(JavaHome, "bin", "java")); err != nil {
		t.Fatalf("host JDK 17 expected at %s (make prereqs): %v", JavaHome, err)
	}
	dst := t.TempDir()
	if err := slimRoot("/", dst, JavaHome); err != nil {
		t.Fatal(err)
	}
	for _, shell := range []string{"/bin/sh", "/usr/bin/sh", "/bin/bash", "/usr/bin/bash", "/usr/bin/tar"} {
		if _, err := os.Lstat(filepath.Join(dst, shell)); err == nil {
			t.Errorf("%s was copied", shell)
		}
	}
	// java finds libjli through an $ORIGIN rpath, which the loader resolves
	// through /proc/self/exe: give the chroot a /proc, as a container has,
	// in a mount namespace that goes away with the command.
	if err := os.Mkdir(filepath.Join(dst, "proc"), 0o555); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("unshare", "--mount", "--pid", "--fork", "--mount-proc="+filepath.Join(dst, "proc"),
		"chroot", dst, JavaHome+"/bin/java", "-version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "17.") {
		t.Fatalf("java -version in the slim root: %v\n%s", err, out)
	}
	if err := exec.Command("chroot", dst, "/bin/sh", "-c", "true").Run(); err == nil {
		t.Fatal("a shell runs in the slim root")
	}
}

// TestMemcachedImageHoldsOnlyMemcachedAndItsLibraries builds the memcached
// image from the cached Debian root filesystem (debootstrapped on first use)
// and checks that it holds the binary, the libraries it links and no shell,
// then runs the binary from a slim copy in a chroot: nothing it needs is
// missing.
func TestMemcachedImageHoldsOnlyMemcachedAndItsLibraries(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("debootstrap and chroot need root, and CI runs as root")
		}
		t.Skip("debootstrap and chroot need root")
	}
	cache, err := DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	a, err := BuildMemcached(t.Context(), t.TempDir(), cache)
	if err != nil {
		t.Fatal(err)
	}
	files, entrypoint := archiveFiles(t, a)
	if len(entrypoint) != 1 || entrypoint[0] != MemcachedBinary {
		t.Fatalf("entrypoint %q, want %s", entrypoint, MemcachedBinary)
	}
	for _, want := range []string{MemcachedBinary, "/usr/lib/x86_64-linux-gnu/libevent-2.1.so.7", "/etc/passwd"} {
		if files[want] == nil {
			t.Errorf("image lacks %s", want)
		}
	}
	for _, shell := range []string{"/bin/sh", "/usr/bin/sh", "/usr/bin/bash", "/usr/bin/apt-get", "/usr/bin/perl"} {
		if files[shell] != nil {
			t.Errorf("image holds %s", shell)
		}
	}
	rootfs, err := MemcachedRootfs(t.Context(), cache)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := slimRoot(rootfs, dst, MemcachedBinary); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("chroot", "--userspec=65534:65534", dst, MemcachedBinary, "-V").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "memcached 1.6") {
		t.Fatalf("memcached -V in the slim root: %v\n%s", err, out)
	}
}
