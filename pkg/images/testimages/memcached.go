package testimages

import (
	"context"
	"os"
	"path/filepath"
	"strconv"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/handlerkit/handlerkit/pkg/images"
)

// MemcachedRef is the memcached image of the memcached example operator.
const MemcachedRef = "localhost/handlerkit/memcached:v1"

// MemcachedPort is the TCP port memcached listens on in MemcachedRef.
const MemcachedPort = 11211

// MemcachedBinary is where the memcached server is in MemcachedRef, as
// Debian installs it.
const MemcachedBinary = "/usr/bin/memcached"

// memcachedRootfsName names the cached memcached root filesystem; change it
// when the package list changes so that old caches are not reused.
const memcachedRootfsName = "bookworm-minbase-memcached-v1"

// MemcachedRootfs returns a Debian bookworm minbase root filesystem with
// Debian's memcached package, building it into cacheDir with debootstrap the
// first time (about a minute and 200 MB). It needs root and the debootstrap
// package; $HANDLERKIT_DEBIAN_MIRROR picks the mirror.
func MemcachedRootfs(ctx context.Context, cacheDir string) (string, error) {
	unlock, err := lockRootfsCache(cacheDir)
	if err != nil {
		return "", err
	}
	defer unlock()
	dir := filepath.Join(cacheDir, "rootfs", memcachedRootfsName)
	if _, err := os.Stat(filepath.Join(dir, MemcachedBinary)); err == nil {
		return dir, nil
	}
	if err := debootstrap(ctx, dir, "memcached"); err != nil {
		return "", err
	}
	return dir, nil
}

// BuildMemcached writes the memcached image (MemcachedRef) into dir, or
// returns the archive an earlier build left there. The image holds only
// Debian's memcached binary, the shared libraries it links (read from the
// ELF headers: libevent, libsasl2, libssl, libc, ...), the dynamic loader and
// an /etc/passwd; no shell and no package manager. memcached runs as nobody
// (65534) on MemcachedPort, TCP only, with 64 MB of memory for items.
func BuildMemcached(ctx context.Context, dir, cacheDir string) (Archive, error) {
	name := "memcached-" + memcachedRootfsName + ".tar"
	if a, ok := cached(dir, name, MemcachedRef); ok {
		return a, nil
	}
	rootfs, err := MemcachedRootfs(ctx, cacheDir)
	if err != nil {
		return Archive{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Archive{}, err
	}
	slim, err := os.MkdirTemp(dir, ".slim-")
	if err != nil {
		return Archive{}, err
	}
	defer os.RemoveAll(slim)
	if err := slimRoot(rootfs, slim, MemcachedBinary); err != nil {
		return Archive{}, err
	}
	etc := filepath.Join(slim, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return Archive{}, err
	}
	// memcached needs no user database to run as a non-root uid, but tools
	// and humans looking at the process expect the uid to have a name.
	passwd := "root:x:0:0:root:/root:/nonexistent\nnobody:x:65534:65534:nobody:/nonexistent:/nonexistent\n"
	if err := os.WriteFile(filepath.Join(etc, "passwd"), []byte(passwd), 0o644); err != nil {
		return Archive{}, err
	}
	if err := os.WriteFile(filepath.Join(etc, "group"), []byte("root:x:0:\nnogroup:x:65534:\n"), 0o644); err != nil {
		return Archive{}, err
	}
	layer, err := images.DirLayer(slim, dir)
	if err != nil {
		return Archive{}, err
	}
	archive, err := writeImage(dir, name, images.Spec{
		Ref:    MemcachedRef,
		Layers: []v1.Layer{layer},
		// -U 0: no UDP listener, which amplification attacks abuse.
		Entrypoint: []string{MemcachedBinary},
		Cmd:        []string{"-p", strconv.Itoa(MemcachedPort), "-U", "0", "-m", "64"},
		User:       "65534:65534",
	})
	removeLayerTemps(dir)
	return archive, err
}

// MemcachedOperatorRef is the image of the memcached example operator, which
// its deploy/operator.yaml runs.
const MemcachedOperatorRef = "localhost/handlerkit/memcached-operator:v1"

// BuildMemcachedOperator writes the memcached example operator's image
// (MemcachedOperatorRef) into dir: its static binary at
// /usr/local/bin/memcached-operator, run as nobody. Like BuildGoBinary it
// needs the current directory inside the handlerkit module.
func BuildMemcachedOperator(ctx context.Context, dir string) (Archive, error) {
	return goImage(ctx, dir, "memcached-operator.tar", MemcachedOperatorRef,
		Binary{Package: "github.com/handlerkit/handlerkit/examples/memcached-operator", Path: "/usr/local/bin/memcached-operator"},
		images.Spec{User: "65534:65534"})
}
