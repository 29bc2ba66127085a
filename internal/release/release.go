// Package release builds and pushes handlerkit's release artefacts without a
// container engine (`make release`, `make push`, docs/release.md):
//
//   - the agent image (the operator, jmx-attach and the java agent, the
//     Dockerfile's layout) as a multi-architecture OCI image index, in an
//     OCI image layout tarball;
//   - its SBOM (SPDX 2.3 JSON): the Go modules of both binaries and the
//     Maven artefacts shaded into the agent jar;
//   - the packaged Helm chart (.tgz), written without Helm;
//   - the single-file install manifests rendered from deploy/;
//   - SHA256SUMS over all of them.
//
// Build and Push are what hack/release runs; tests call them directly.
package release

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// DefaultRegistry is the registry and namespace the image and the chart are
// named after when Options.Registry is empty: the manifests' and the chart's
// own default (deploy/, charts/).
const DefaultRegistry = "ghcr.io/handlerkit"

// DefaultOutDir is where Build writes when Options.OutDir is empty, relative
// to the working directory.
const DefaultOutDir = "dist"

// DefaultPlatforms are the platforms of the image index when
// Options.Platforms is empty.
var DefaultPlatforms = []string{"linux/amd64", "linux/arm64"}

// Names of the artefacts, the image's repository and the chart.
const (
	// ImageRepository is the image's repository under the registry.
	ImageRepository = "jmx-agent"
	// ChartName is the chart's name (its directory under charts/).
	ChartName = "prometheus-jmx-exporter-operator"
	// ChartRepository is the chart's repository under the registry, as an
	// OCI artefact (helm install oci://<registry>/charts/<ChartName>).
	ChartRepository = "charts/" + ChartName
	// ManifestFile is the namespaced single-file install (deploy/).
	ManifestFile = ChartName + ".yaml"
	// ClusterWideManifestFile is the every-namespace single-file install
	// (deploy/operator/cluster-wide).
	ClusterWideManifestFile = ChartName + "-cluster-wide.yaml"
	// SumsFile holds the SHA-256 of every other artefact, in sha256sum's
	// format.
	SumsFile = "SHA256SUMS"
)

// Paths inside the image, as the Dockerfile puts them.
const (
	// OperatorPath is the operator's binary in the image.
	OperatorPath = "/usr/local/bin/prometheus-jmx-exporter-operator"
	// JMXAttachPath is jmx-attach in the image, its entrypoint.
	JMXAttachPath = "/usr/local/bin/jmx-attach"
	// AgentJarPath is the java agent in the image.
	AgentJarPath = "/opt/handlerkit/jmx-agent.jar"
	// ImageUser is the image's user, as the Dockerfile's USER.
	ImageUser = "65532:65532"
)

const modulePath = "github.com/handlerkit/handlerkit"

// Options configure Build. The zero value builds both platforms from the
// repository around the working directory into dist/.
type Options struct {
	// Repo is the repository's root (VERSION, go.mod, deploy/, charts/);
	// empty means the nearest directory above the working directory that
	// holds handlerkit's go.mod and VERSION.
	Repo string
	// OutDir is the directory the artefacts are written into (DefaultOutDir
	// when empty). It must not exist, be empty, or hold an earlier release
	// (a SHA256SUMS file): Build empties it.
	OutDir string
	// Registry is the registry and namespace, such as "ghcr.io/handlerkit"
	// or "127.0.0.1:5000/handlerkit" (DefaultRegistry when empty). The image
	// is <Registry>/jmx-agent:v<VERSION>, and the install manifests and the
	// chart's default image name it, so that Push sends them there.
	Registry string
	// Platforms are the image index's platforms, "linux/<arch>"
	// (DefaultPlatforms when empty).
	Platforms []string
	// Commit and Date are stamped into the binaries as the Makefile does;
	// empty means the repository's HEAD and its commit date (UTC, RFC 3339),
	// or "unknown" outside git.
	Commit, Date string
	// AgentJar is the java agent; empty means the production jar,
	// built from agent/ as the tests build it (jvmtest.AgentJar).
	AgentJar string
	// Log receives a line per step; nil discards them.
	Log io.Writer
}

// Artefacts are what Build wrote: absolute paths of files in Dir.
type Artefacts struct {
	// Dir is the output directory.
	Dir string
	// Version is the release without its "v" (VERSION), the chart's version.
	Version string
	// ImageRef is <registry>/jmx-agent:v<Version>.
	ImageRef string
	// IndexDigest is the image index's digest (sha256:...).
	IndexDigest string
	// PlatformDigests maps each platform ("linux/amd64") to its image
	// manifest's digest.
	PlatformDigests map[string]string
	// ImageLayout is the OCI image layout tarball holding the index.
	ImageLayout string
	// SBOM is the SPDX 2.3 JSON document.
	SBOM string
	// Chart is the packaged chart.
	Chart string
	// ChartRef is <registry>/charts/prometheus-jmx-exporter-operator:<Version>.
	ChartRef string
	// Manifest and ClusterWideManifest are the single-file installs.
	Manifest, ClusterWideManifest string
	// Sums is the SHA256SUMS file.
	Sums string
}

// Files lists the artefacts that SHA256SUMS covers, in its order.
func (a Artefacts) Files() []string {
	return []string{a.ImageLayout, a.SBOM, a.Chart, a.Manifest, a.ClusterWideManifest}
}

// Build writes every artefact into opts.OutDir. It builds the binaries with
// the go tool found on PATH and, unless opts.AgentJar is set, the agent jar
// with Maven (cached); everything else is done in process. The same inputs
// (sources, commit, date, toolchain, registry) give the same files.
func Build(ctx context.Context, opts Options) (Artefacts, error) {
	o, err := opts.complete(ctx)
	if err != nil {
		return Artefacts{}, err
	}
	version, err := readVersion(o.Repo)
	if err != nil {
		return Artefacts{}, err
	}
	if err := prepareOutDir(o.OutDir); err != nil {
		return Artefacts{}, err
	}
	a := Artefacts{Dir: o.OutDir, Version: version,
		ImageRef: o.Registry + "/" + ImageRepository + ":v" + version,
		ChartRef: o.Registry + "/" + ChartRepository + ":" + version}
	tmp, err := os.MkdirTemp("", "handlerkit-release-")
	if err != nil {
		return Artefacts{}, fmt.Errorf("release: %w", err)
	}
	defer os.RemoveAll(tmp)

	img, err := buildImage(ctx, o, version, a.ImageRef, tmp)
	if err != nil {
		return Artefacts{}, err
	}
	a.IndexDigest, a.PlatformDigests = img.indexDigest, img.platformDigests
	a.ImageLayout = filepath.Join(o.OutDir, ImageRepository+"-v"+version+".oci.tar")
	if err := writeLayoutTarball(img.index, a.ImageRef, a.ImageLayout, tmp); err != nil {
		return Artefacts{}, err
	}
	o.logf("image %s@%s written to %s", a.ImageRef, a.IndexDigest, a.ImageLayout)

	a.SBOM = filepath.Join(o.OutDir, ImageRepository+"-v"+version+".spdx.json")
	if err := writeSBOM(ctx, o, version, a, img, a.SBOM); err != nil {
		return Artefacts{}, err
	}
	o.logf("SBOM written to %s", a.SBOM)

	a.Chart, err = PackageChart(filepath.Join(o.Repo, "charts", ChartName), o.OutDir, o.Registry)
	if err != nil {
		return Artefacts{}, err
	}
	o.logf("chart written to %s", a.Chart)

	a.Manifest = filepath.Join(o.OutDir, ManifestFile)
	a.ClusterWideManifest = filepath.Join(o.OutDir, ClusterWideManifestFile)
	if err := writeManifest(filepath.Join(o.Repo, "deploy"), a.ImageRef, a.Manifest); err != nil {
		return Artefacts{}, err
	}
	if err := writeManifest(filepath.Join(o.Repo, "deploy", "operator", "cluster-wide"), a.ImageRef,
		a.ClusterWideManifest); err != nil {
		return Artefacts{}, err
	}
	o.logf("install manifests written to %s and %s", a.Manifest, a.ClusterWideManifest)

	a.Sums = filepath.Join(o.OutDir, SumsFile)
	if err := WriteSums(a.Sums, a.Files()...); err != nil {
		return Artefacts{}, err
	}
	o.logf("checksums written to %s", a.Sums)
	return a, nil
}

// complete fills opts' defaults.
func (opts Options) complete(ctx context.Context) (Options, error) {
	o := opts
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Repo == "" {
		root, err := FindRepo()
		if err != nil {
			return o, err
		}
		o.Repo = root
	}
	if o.OutDir == "" {
		o.OutDir = DefaultOutDir
	}
	var err error
	if o.OutDir, err = filepath.Abs(o.OutDir); err != nil {
		return o, fmt.Errorf("release: %w", err)
	}
	if o.Registry == "" {
		o.Registry = DefaultRegistry
	}
	if err := checkRegistry(o.Registry); err != nil {
		return o, err
	}
	if len(o.Platforms) == 0 {
		o.Platforms = DefaultPlatforms
	}
	for _, p := range o.Platforms {
		if _, err := parsePlatform(p); err != nil {
			return o, err
		}
	}
	if o.Commit == "" {
		o.Commit = gitOutput(ctx, o.Repo, nil, "rev-parse", "HEAD")
	}
	if o.Date == "" {
		o.Date = gitOutput(ctx, o.Repo, []string{"TZ=UTC"}, "log", "-1", "--format=%cd",
			"--date=format-local:%Y-%m-%dT%H:%M:%SZ")
	}
	if o.Date != "unknown" {
		if _, err := time.Parse(time.RFC3339, o.Date); err != nil {
			return o, fmt.Errorf("release: date %q is not RFC 3339: %w", o.Date, err)
		}
	}
	if o.AgentJar == "" {
		jar, err := jvmtest.AgentJar(ctx)
		if err != nil {
			return o, fmt.Errorf("release: the agent jar: %w", err)
		}
		o.AgentJar = jar
	}
	return o, nil
}

func (opts Options) logf(format string, args ...any) {
	fmt.Fprintf(opts.Log, "release: "+format+"\n", args...)
}

// gitOutput is git's output in repo, trimmed, or "unknown" when git fails
// (as the Makefile's COMMIT and DATE).
func gitOutput(ctx context.Context, repo string, env []string, args ...string) string {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", repo}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if s := strings.TrimSpace(string(out)); err == nil && s != "" {
		return s
	}
	return "unknown"
}

// FindRepo returns the nearest directory at or above the working directory
// that holds handlerkit's go.mod and a VERSION file.
func FindRepo() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("release: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(mod, []byte("module "+modulePath+"\n")) {
			if _, err := os.Stat(filepath.Join(dir, "VERSION")); err == nil {
				return dir, nil
			}
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("release: no handlerkit repository (go.mod of %s and VERSION) at or above %s", modulePath, wd)
		}
	}
}

// readVersion returns the VERSION file's version, without a "v".
func readVersion(repo string) (string, error) {
	data, err := os.ReadFile(filepath.Join(repo, "VERSION"))
	if err != nil {
		return "", fmt.Errorf("release: %w", err)
	}
	v := strings.TrimSpace(string(data))
	if v == "" || strings.HasPrefix(v, "v") || strings.ContainsAny(v, " \t\n/:") {
		return "", fmt.Errorf("release: VERSION holds %q, want a version such as 0.2.0", v)
	}
	return v, nil
}

// prepareOutDir makes dir an empty directory, refusing to empty one that
// holds files but no SHA256SUMS (not an earlier release's output).
func prepareOutDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("release: %w", err)
	case len(entries) > 0:
		if _, err := os.Stat(filepath.Join(dir, SumsFile)); err != nil {
			return fmt.Errorf("release: %s is not empty and holds no %s: not an earlier release, left alone", dir, SumsFile)
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("release: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}
