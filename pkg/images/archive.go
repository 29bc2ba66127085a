package images

import (
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Format is the on-disk format of an image archive, for Write.
type Format int

const (
	// DockerArchive is the `docker save` format: manifest.json plus layers.
	// containerd imports it and keeps the tag from manifest.json.
	DockerArchive Format = iota
	// OCILayout is an OCI image layout directory (index.json, oci-layout,
	// blobs/) with the tag in the org.opencontainers.image.ref.name
	// annotation; WriteOCIArchive tars it up.
	OCILayout
)

// WriteDockerArchive writes img tagged ref into a docker-archive tarball at
// file, replacing it atomically.
func WriteDockerArchive(file, ref string, img v1.Image) error {
	tag, err := ParseTag(ref)
	if err != nil {
		return err
	}
	// A temporary name of its own: test binaries of several packages may
	// write the same cached archive at once.
	f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".tmp-*")
	if err != nil {
		return fmt.Errorf("images: writing %s: %w", file, err)
	}
	tmp := f.Name()
	f.Close()
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("images: writing %s: %w", file, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, file)
}

// WriteOCILayout writes img into a new OCI image layout directory dir,
// annotated with ref so that importers keep the tag.
func WriteOCILayout(dir, ref string, img v1.Image) error {
	tag, err := ParseTag(ref)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("images: creating OCI layout %s: %w", dir, err)
	}
	// containerd's importer names images after this annotation, in full.
	ann := map[string]string{"io.containerd.image.name": tag.Name(), "org.opencontainers.image.ref.name": tag.TagStr()}
	if err := p.AppendImage(img, layout.WithAnnotations(ann)); err != nil {
		return fmt.Errorf("images: writing OCI layout %s: %w", dir, err)
	}
	return nil
}

// Write writes img tagged ref to file in the given format; for OCILayout the
// layout directory is packed into a tarball at file.
func Write(file, ref string, img v1.Image, format Format) error {
	switch format {
	case DockerArchive:
		return WriteDockerArchive(file, ref, img)
	case OCILayout:
		dir, err := os.MkdirTemp("", "oci-layout-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := WriteOCILayout(dir, ref, img); err != nil {
			return err
		}
		return WriteDirTarball(dir, file)
	default:
		return fmt.Errorf("images: unknown archive format %d", format)
	}
}

// Digest returns the manifest digest of img, the identity containerd and the
// kubelet report for it.
func Digest(img v1.Image) (string, error) {
	h, err := img.Digest()
	if err != nil {
		return "", err
	}
	return h.String(), nil
}
