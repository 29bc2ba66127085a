package release

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/handlerkit/handlerkit/pkg/images"
)

// The binaries in the image: the main package and its path in the image.
var binaries = []struct{ pkg, path string }{
	{modulePath + "/cmd/prometheus-jmx-exporter-operator", OperatorPath},
	{modulePath + "/cmd/jmx-attach", JMXAttachPath},
}

// Annotations and labels of the image and its index.
const (
	annVersion  = "org.opencontainers.image.version"
	annRevision = "org.opencontainers.image.revision"
	annSource   = "org.opencontainers.image.source"
	annCreated  = "org.opencontainers.image.created"
	annRefName  = "org.opencontainers.image.ref.name"
	// annImageName is the full reference containerd's importer names an
	// image after, and that Push reads back to refuse another registry.
	annImageName = "io.containerd.image.name"
	sourceURL    = "https://" + modulePath
)

// builtImage is the image index and what went into it.
type builtImage struct {
	index           v1.ImageIndex
	indexDigest     string
	platformDigests map[string]string
	// binaries maps each platform to the host paths of its binaries, by
	// their path in the image.
	binaries map[string]map[string]string
	agentJar string
}

// parsePlatform parses "linux/<arch>"; other systems and variants are
// refused (the binaries are built for Linux, and GOARM is not set).
func parsePlatform(s string) (v1.Platform, error) {
	p, err := v1.ParsePlatform(s)
	if err != nil {
		return v1.Platform{}, fmt.Errorf("release: platform %q: %w", s, err)
	}
	if p.OS != "linux" || p.Architecture == "" || p.Variant != "" || p.OSVersion != "" {
		return v1.Platform{}, fmt.Errorf("release: platform %q: want linux/<GOARCH>, such as linux/amd64", s)
	}
	return *p, nil
}

// checkRegistry refuses a registry whose first element is not a host:
// go-containerregistry would send such a name to its default registry.
func checkRegistry(registry string) error {
	repo, err := name.NewRepository(registry+"/"+ImageRepository, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("release: registry %q: %w", registry, err)
	}
	host, _, _ := strings.Cut(registry, "/")
	if repo.RegistryStr() != host || !strings.ContainsAny(host, ".:") && host != "localhost" {
		return fmt.Errorf("release: registry %q must start with a registry host (host[:port][/namespace])", registry)
	}
	return nil
}

// ldflags are the Makefile's LDFLAGS plus -s -w, as the Dockerfile's.
func ldflags(version, commit, date string) string {
	const bi = modulePath + "/internal/buildinfo"
	return fmt.Sprintf("-s -w -X %s.version=v%s -X %s.commit=%s -X %s.date=%s", bi, version, bi, commit, bi, date)
}

// goBuild builds the image's binaries for platform p into dir.
func goBuild(ctx context.Context, o Options, version string, p v1.Platform, dir string) (map[string]string, error) {
	args := []string{"build", "-trimpath", "-ldflags=" + ldflags(version, o.Commit, o.Date), "-o", dir + string(os.PathSeparator)}
	for _, b := range binaries {
		args = append(args, b.pkg)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = o.Repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("release: go build for %s: %w\n%s", p.String(), err, out)
	}
	paths := map[string]string{}
	for _, b := range binaries {
		paths[b.path] = filepath.Join(dir, filepath.Base(b.pkg))
	}
	return paths, nil
}

// created is the image's creation time: the commit's date, so that one
// commit gives one image, or the epoch when it is unknown.
func created(date string) time.Time {
	if t, err := time.Parse(time.RFC3339, date); err == nil {
		return t.UTC()
	}
	return time.Unix(0, 0).UTC()
}

// buildImage builds the binaries for every platform and assembles the
// image index: per platform, a layer with the jar (the same blob for all)
// and one with the binaries.
func buildImage(ctx context.Context, o Options, version, ref, tmp string) (builtImage, error) {
	out := builtImage{platformDigests: map[string]string{}, binaries: map[string]map[string]string{}, agentJar: o.AgentJar}
	jarLayer, err := images.FilesLayer(images.File{Path: AgentJarPath, Source: o.AgentJar, Mode: 0o644})
	if err != nil {
		return out, fmt.Errorf("release: %w", err)
	}
	labels := map[string]string{annSource: sourceURL, annVersion: "v" + version, annRevision: o.Commit}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, ps := range o.Platforms {
		p, _ := parsePlatform(ps) // checked by complete
		o.logf("building the binaries for %s", ps)
		dir := filepath.Join(tmp, p.OS+"-"+p.Architecture)
		bins, err := goBuild(ctx, o, version, p, dir)
		if err != nil {
			return out, err
		}
		out.binaries[ps] = bins
		var files []images.File
		for _, b := range binaries {
			files = append(files, images.File{Path: b.path, Source: bins[b.path], Mode: 0o755})
		}
		binLayer, err := images.FilesLayer(files...)
		if err != nil {
			return out, fmt.Errorf("release: %w", err)
		}
		img, err := platformImage(p, o.Date, labels, jarLayer, binLayer)
		if err != nil {
			return out, err
		}
		d, err := img.Digest()
		if err != nil {
			return out, fmt.Errorf("release: %w", err)
		}
		out.platformDigests[ps] = d.String()
		pl := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &pl}})
	}
	idx, ok := mutate.Annotations(idx, map[string]string{annSource: sourceURL, annVersion: "v" + version,
		annRevision: o.Commit, annCreated: created(o.Date).Format(time.RFC3339)}).(v1.ImageIndex)
	if !ok {
		return out, fmt.Errorf("release: annotating the index of %s", ref)
	}
	d, err := idx.Digest()
	if err != nil {
		return out, fmt.Errorf("release: %w", err)
	}
	out.index, out.indexDigest = idx, d.String()
	return out, nil
}

// platformImage is one platform's image, with OCI media types and the
// Dockerfile's configuration.
func platformImage(p v1.Platform, date string, labels map[string]string, layers ...v1.Layer) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range layers {
		var err error
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l, MediaType: types.OCILayer}); err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = p.OS, p.Architecture
	cf.Created = v1.Time{Time: created(date)}
	cf.Config.Entrypoint = []string{JMXAttachPath}
	cf.Config.Cmd = nil
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cf.Config.User = ImageUser
	cf.Config.Labels = labels
	cf.History = nil
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	return img, nil
}

// writeLayoutTarball writes idx into an OCI image layout, annotated with
// ref as containerd's importer and crane expect, and packs it into file
// with fixed times and owners.
func writeLayoutTarball(idx v1.ImageIndex, ref, file, tmp string) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	dir := filepath.Join(tmp, "oci-layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		annImageName: tag.Name(), annRefName: tag.TagStr()})); err != nil {
		return fmt.Errorf("release: writing the OCI layout: %w", err)
	}
	return tarDir(dir, file)
}

// tarDir packs the regular files and directories under dir into file:
// sorted, owned by root, modes 0644 and 0755, at the epoch.
func tarDir(dir, file string) (err error) {
	var paths []string
	if err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if path != dir {
			paths = append(paths, path)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	sort.Strings(paths)
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("release: %w", cerr)
		}
	}()
	tw := tar.NewWriter(f)
	epoch := time.Unix(0, 0).UTC()
	for _, path := range paths {
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		info, err := os.Lstat(path)
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case info.IsDir():
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
		case info.Mode().IsRegular():
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, info.Size()
		default:
			return fmt.Errorf("release: %s is neither a file nor a directory", path)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if err := copyInto(tw, path); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

func copyInto(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	defer f.Close()
	if _, err := io.Copy(w, f); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}
