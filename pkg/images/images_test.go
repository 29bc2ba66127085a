package images_test

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/handlerkit/handlerkit/pkg/images"
)

// files extracts the flattened filesystem of img: path -> header and content.
func files(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string]string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	hdrs, data := map[string]*tar.Header{}, map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hdrs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		p := "/" + strings.TrimSuffix(h.Name, "/")
		hdrs[p], data[p] = h, string(b)
	}
}

func TestBuildRejectsBadSpecs(t *testing.T) {
	layer, err := images.FilesLayer(images.File{Path: "/x", Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		spec images.Spec
		want string
	}{
		{"empty ref", images.Spec{Layers: []v1.Layer{layer}, Cmd: []string{"/x"}}, "empty image reference"},
		{"no tag", images.Spec{Ref: "localhost/a/b", Layers: []v1.Layer{layer}, Cmd: []string{"/x"}}, "explicit"},
		{"digest", images.Spec{Ref: "localhost/a/b@sha256:" + strings.Repeat("0", 64), Layers: []v1.Layer{layer},
			Cmd: []string{"/x"}}, "explicit"},
		{"no layers", images.Spec{Ref: "localhost/a/b:v1", Cmd: []string{"/x"}}, "no layers"},
		{"no command", images.Spec{Ref: "localhost/a/b:v1", Layers: []v1.Layer{layer}}, "neither entrypoint nor cmd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := images.Build(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}

func TestFilesLayerRejectsRelativeAndAmbiguousFiles(t *testing.T) {
	for _, f := range []images.File{
		{Path: "relative", Data: []byte("x")},
		{Path: "/a/../b", Data: []byte("x")},
		{Path: "/both", Data: []byte("x"), Source: "/etc/hostname"},
		{Path: "/neither"},
	} {
		if _, err := images.FilesLayer(f); err == nil {
			t.Errorf("FilesLayer(%+v) succeeded, want an error", f)
		}
	}
}

func TestDockerArchiveRoundTripKeepsTagConfigAndFiles(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	layer, err := images.FilesLayer(
		images.File{Path: "/usr/local/bin/tool", Source: bin},
		images.File{Path: "/etc/tool/config.yaml", Data: []byte("a: 1\n"), Mode: 0o640},
	)
	if err != nil {
		t.Fatal(err)
	}
	const ref = "ghcr.io/handlerkit/example:v1"
	img, err := images.Build(images.Spec{Ref: ref, Layers: []v1.Layer{layer},
		Entrypoint: []string{"/usr/local/bin/tool"}, Env: []string{"A=b"}, User: "65534"})
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "img.tar")
	if err := images.WriteDockerArchive(archive, ref, img); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag(ref)
	back, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatalf("the archive does not hold %s: %v", ref, err)
	}
	want, _ := img.Digest()
	if got, _ := back.Digest(); got != want {
		t.Fatalf("digest changed through the archive: %s != %s", got, want)
	}
	cf, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.Entrypoint[0] != "/usr/local/bin/tool" || cf.Config.User != "65534" || cf.OS != "linux" {
		t.Fatalf("config lost fields: %+v", cf.Config)
	}
	if !strings.HasPrefix(strings.Join(cf.Config.Env, ","), "PATH=/usr/local/sbin:") {
		t.Fatalf("a default PATH should lead the env, got %q", cf.Config.Env)
	}
	hdrs, data := files(t, back)
	if h := hdrs["/usr/local/bin/tool"]; h == nil || h.Mode != 0o755 || data["/usr/local/bin/tool"] != "#!binary" {
		t.Fatalf("tool missing or wrong: %+v", h)
	}
	if h := hdrs["/etc/tool/config.yaml"]; h == nil || h.Mode != 0o640 || h.Uid != 0 {
		t.Fatalf("config file missing or wrong: %+v", h)
	}
	if hdrs["/usr/local/bin"] == nil || hdrs["/usr/local/bin"].Typeflag != tar.TypeDir {
		t.Fatal("parent directories are not in the layer")
	}
}

func TestBuildIsReproducible(t *testing.T) {
	digest := func() v1.Hash {
		layer, err := images.FilesLayer(images.File{Path: "/a", Data: []byte("same")})
		if err != nil {
			t.Fatal(err)
		}
		img, err := images.Build(images.Spec{Ref: "localhost/r/r:v1", Layers: []v1.Layer{layer}, Cmd: []string{"/a"}})
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if a, b := digest(), digest(); a != b {
		t.Fatalf("same inputs gave digests %s and %s", a, b)
	}
}

func TestOCILayoutNamesTheImage(t *testing.T) {
	layer, err := images.FilesLayer(images.File{Path: "/a", Data: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	const ref = "localhost/handlerkit/oci:v2"
	img, err := images.Build(images.Spec{Ref: ref, Layers: []v1.Layer{layer}, Cmd: []string{"/a"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := images.WriteOCILayout(dir, ref, img); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != want ||
		m.Manifests[0].Annotations["io.containerd.image.name"] != ref ||
		m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v2" {
		t.Fatalf("index does not name %s at %s: %+v", ref, want, m.Manifests)
	}
	archive := filepath.Join(t.TempDir(), "oci.tar")
	if err := images.Write(archive, ref, img, images.OCILayout); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(archive); err != nil || info.Size() == 0 {
		t.Fatalf("OCI archive not written: %v", err)
	}
}

func TestDirTarballKeepsLinksModesAndOwnersAndSkipsDevices(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/lib/libx.so.1"), []byte("lib"), 0o750))
	must(os.Symlink("usr/lib", filepath.Join(root, "lib")))
	must(os.Link(filepath.Join(root, "usr/lib/libx.so.1"), filepath.Join(root, "usr/lib/libx-hard.so")))
	must(os.Chown(filepath.Join(root, "usr/lib/libx.so.1"), 123, 456))
	must(syscall.Mkfifo(filepath.Join(root, "fifo"), 0o600))

	out := filepath.Join(t.TempDir(), "layer.tar")
	must(images.WriteDirTarball(root, out))
	first, err := os.ReadFile(out)
	must(err)
	must(images.WriteDirTarball(root, out))
	second, err := os.ReadFile(out)
	must(err)
	if !bytes.Equal(first, second) {
		t.Fatal("packing the same tree twice gave different tarballs")
	}
	entries := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(first))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(err)
		entries[strings.TrimSuffix(h.Name, "/")] = h
	}
	if h := entries["lib"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "usr/lib" {
		t.Errorf("symlink lost: %+v", h)
	}
	lib, hard := entries["usr/lib/libx.so.1"], entries["usr/lib/libx-hard.so"]
	// Entries are sorted, so the hard link comes first and holds the data.
	if hard == nil || hard.Typeflag != tar.TypeReg || lib == nil || lib.Typeflag != tar.TypeLink ||
		lib.Linkname != "usr/lib/libx-hard.so" {
		t.Errorf("hard link lost: %+v / %+v", hard, lib)
	}
	if hard != nil && (hard.Mode&0o777 != 0o750 || hard.Uid != 123 || hard.Gid != 456) {
		t.Errorf("mode or owner lost: mode %o uid %d gid %d", hard.Mode, hard.Uid, hard.Gid)
	}
	if _, ok := entries["fifo"]; ok {
		t.Error("a FIFO was packed; the runtime provides special files")
	}
	if err := images.WriteDirTarball(filepath.Join(root, "missing"), out); err == nil {
		t.Error("a missing root filesystem must be an error")
	}
}
