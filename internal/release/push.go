package release

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// Helm's media types for a chart stored as an OCI artefact (helm push,
// helm install oci://...).
const (
	// HelmConfigMediaType is the chart's config blob: Chart.yaml as JSON.
	HelmConfigMediaType types.MediaType = "application/vnd.cncf.helm.config.v1+json"
	// HelmChartMediaType is the chart's one layer: the packaged .tgz.
	HelmChartMediaType types.MediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// Pushed is what Push sent.
type Pushed struct {
	// ImageRef and ImageDigest are the image index's tag and digest.
	ImageRef, ImageDigest string
	// ChartRef and ChartDigest are the chart artefact's tag
	// (<registry>/charts/prometheus-jmx-exporter-operator:<version>) and
	// manifest digest.
	ChartRef, ChartDigest string
}

// Push sends the release Build wrote into dir to registry: the image index
// to <registry>/jmx-agent:v<version> and the chart, as an OCI artefact with
// Helm's media types, to <registry>/charts/prometheus-jmx-exporter-operator:<version>.
// It first checks SHA256SUMS, and refuses a registry other than the one
// the release was built for (its install manifests and chart name that one:
// rebuild with that registry). Credentials come from the default keychain
// (docker's config.json, as `docker login` or `helm registry login` writes
// it); plain HTTP is used for localhost and 127.0.0.1 only, and another
// registry that go-containerregistry would reach over plain HTTP (a private
// address) is refused.
func Push(ctx context.Context, dir, registry string) (Pushed, error) {
	if registry == "" {
		registry = DefaultRegistry
	}
	if err := checkRegistry(registry); err != nil {
		return Pushed{}, err
	}
	nameOpts, err := registryOptions(registry)
	if err != nil {
		return Pushed{}, err
	}
	names, err := VerifySums(filepath.Join(dir, SumsFile))
	if err != nil {
		return Pushed{}, err
	}
	var layoutTar, chart string
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, ImageRepository+"-v") && strings.HasSuffix(n, ".oci.tar"):
			layoutTar = filepath.Join(dir, n)
		case strings.HasPrefix(n, ChartName+"-") && strings.HasSuffix(n, ".tgz"):
			chart = filepath.Join(dir, n)
		}
	}
	if layoutTar == "" || chart == "" {
		return Pushed{}, fmt.Errorf("release: %s lists no image layout or no chart: not a release directory", filepath.Join(dir, SumsFile))
	}
	tmp, err := os.MkdirTemp("", "handlerkit-push-")
	if err != nil {
		return Pushed{}, fmt.Errorf("release: %w", err)
	}
	defer os.RemoveAll(tmp)
	idx, builtRef, err := readLayoutTarball(layoutTar, tmp)
	if err != nil {
		return Pushed{}, err
	}
	tag, err := name.NewTag(builtRef, nameOpts...)
	if err != nil {
		return Pushed{}, fmt.Errorf("release: %w", err)
	}
	if tag.Context().Name() != registry+"/"+ImageRepository {
		return Pushed{}, fmt.Errorf("release: %s was built for %s, not %s: build it for this registry (make release REGISTRY=%s)",
			dir, builtRef, registry, registry)
	}
	remoteOpts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if err := remote.WriteIndex(tag, idx, remoteOpts...); err != nil {
		return Pushed{}, fmt.Errorf("release: pushing %s: %w", tag, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return Pushed{}, fmt.Errorf("release: %w", err)
	}
	out := Pushed{ImageRef: tag.String(), ImageDigest: d.String()}

	art, version, err := chartArtefact(chart)
	if err != nil {
		return Pushed{}, err
	}
	chartTag, err := name.NewTag(registry+"/"+ChartRepository+":"+version, nameOpts...)
	if err != nil {
		return Pushed{}, fmt.Errorf("release: %w", err)
	}
	if err := remote.Write(chartTag, art, remoteOpts...); err != nil {
		return Pushed{}, fmt.Errorf("release: pushing %s: %w", chartTag, err)
	}
	if d, err = art.Digest(); err != nil {
		return Pushed{}, fmt.Errorf("release: %w", err)
	}
	out.ChartRef, out.ChartDigest = chartTag.String(), d.String()
	return out, nil
}

// registryOptions allows plain HTTP for a loopback registry and refuses
// another that go-containerregistry would reach without TLS.
func registryOptions(registry string) ([]name.Option, error) {
	host, _, _ := strings.Cut(registry, "/")
	hostname := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		hostname = h
	}
	if hostname == "localhost" || hostname == "127.0.0.1" {
		return []name.Option{name.Insecure, name.StrictValidation}, nil
	}
	reg, err := name.NewRegistry(host, name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	if reg.Scheme() != "https" {
		return nil, fmt.Errorf("release: registry %s would be reached over plain HTTP, which only localhost and 127.0.0.1 may use", host)
	}
	return []name.Option{name.StrictValidation}, nil
}

// readLayoutTarball unpacks an OCI layout tarball that Build wrote into
// dir and returns its one image index and the reference it was built as.
func readLayoutTarball(file, dir string) (v1.ImageIndex, string, error) {
	if err := untar(file, dir); err != nil {
		return nil, "", err
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, "", fmt.Errorf("release: %s: %w", file, err)
	}
	outer, err := p.ImageIndex()
	if err != nil {
		return nil, "", fmt.Errorf("release: %s: %w", file, err)
	}
	m, err := outer.IndexManifest()
	if err != nil {
		return nil, "", fmt.Errorf("release: %s: %w", file, err)
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() || m.Manifests[0].Annotations[annImageName] == "" {
		return nil, "", fmt.Errorf("release: %s holds %d entries, want one image index named by %s", file, len(m.Manifests), annImageName)
	}
	idx, err := outer.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		return nil, "", fmt.Errorf("release: %s: %w", file, err)
	}
	return idx, m.Manifests[0].Annotations[annImageName], nil
}

// untar unpacks file's regular files and directories into dir, refusing
// any other entry and any path that leaves dir.
func untar(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("release: %s: %w", file, err)
		}
		rel := path.Clean(hdr.Name)
		if path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("release: %s: entry %q leaves the directory", file, hdr.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(rel))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return fmt.Errorf("release: %w", err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return fmt.Errorf("release: %w", err)
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				return fmt.Errorf("release: %w", err)
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("release: %w", err)
			}
		default:
			return fmt.Errorf("release: %s: entry %q is neither a file nor a directory", file, hdr.Name)
		}
	}
}

// chartArtefact is the packaged chart as Helm's OCI artefact: its
// Chart.yaml as the config, the .tgz as the one layer.
func chartArtefact(file string) (v1.Image, string, error) {
	tgz, err := os.ReadFile(file)
	if err != nil {
		return nil, "", fmt.Errorf("release: %w", err)
	}
	chartYAML, err := readChartYAML(tgz)
	if err != nil {
		return nil, "", fmt.Errorf("release: %s: %w", file, err)
	}
	config, err := yaml.YAMLToJSON(chartYAML)
	if err != nil {
		return nil, "", fmt.Errorf("release: %s: Chart.yaml: %w", file, err)
	}
	var meta chartMeta
	if err := json.Unmarshal(config, &meta); err != nil || meta.Name == "" || meta.Version == "" {
		return nil, "", fmt.Errorf("release: %s: Chart.yaml names no name and version (%v)", file, err)
	}
	layer := static.NewLayer(tgz, HelmChartMediaType)
	ld, err := layer.Digest()
	if err != nil {
		return nil, "", fmt.Errorf("release: %w", err)
	}
	cd, cs, err := v1.SHA256(strings.NewReader(string(config)))
	if err != nil {
		return nil, "", fmt.Errorf("release: %w", err)
	}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
		Config: v1.Descriptor{MediaType: HelmConfigMediaType, Digest: cd, Size: cs},
		Layers: []v1.Descriptor{{MediaType: HelmChartMediaType, Digest: ld, Size: int64(len(tgz))}},
		Annotations: map[string]string{"org.opencontainers.image.title": meta.Name,
			"org.opencontainers.image.version": meta.Version}}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, "", fmt.Errorf("release: %w", err)
	}
	img, err := partial.CompressedToImage(&rawArtefact{manifest: raw, config: config, layer: layer, layerDigest: ld})
	if err != nil {
		return nil, "", fmt.Errorf("release: %w", err)
	}
	return img, meta.Version, nil
}

// readChartYAML returns <name>/Chart.yaml from a packaged chart.
func readChartYAML(tgz []byte) ([]byte, error) {
	objs, err := readTgz(tgz)
	if err != nil {
		return nil, err
	}
	for n, data := range objs {
		if dir, base := path.Split(n); base == "Chart.yaml" && strings.Count(dir, "/") == 1 {
			return data, nil
		}
	}
	return nil, errors.New("no <name>/Chart.yaml")
}

// rawArtefact is an OCI manifest of our own making with one layer: enough
// of an image for remote.Write.
type rawArtefact struct {
	manifest, config []byte
	layer            v1.Layer
	layerDigest      v1.Hash
}

func (r *rawArtefact) RawConfigFile() ([]byte, error)      { return r.config, nil }
func (r *rawArtefact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (r *rawArtefact) RawManifest() ([]byte, error)        { return r.manifest, nil }

func (r *rawArtefact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if h == r.layerDigest {
		return r.layer, nil
	}
	return nil, fmt.Errorf("release: the chart artefact has no layer %s", h)
}
