package release_test

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/handlerkit/handlerkit/internal/manifest"
	"github.com/handlerkit/handlerkit/internal/release"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

const repo = "../.."

func hostPlatform() string { return "linux/" + runtime.GOARCH }

// build runs Build for opts into a new temporary directory.
func build(t *testing.T, opts release.Options) release.Artefacts {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Fatalf("the release builds Linux binaries that this test runs: run it on Linux, not %s", runtime.GOOS)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if opts.OutDir == "" {
		opts.OutDir = filepath.Join(t.TempDir(), "dist")
	}
	opts.Repo = repo
	if testing.Verbose() {
		opts.Log = os.Stderr
	}
	a, err := release.Build(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// shared is one host-platform build that the tests which only read it
// share (a build is 10 to 30 s warm); TestMain removes it.
var shared struct {
	once sync.Once
	dir  string
	a    release.Artefacts
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// hostBuild returns the shared build for the host's platform with the
// default options.
func hostBuild(t *testing.T) release.Artefacts {
	t.Helper()
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "release-test-"); shared.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		opts := release.Options{Repo: repo, OutDir: filepath.Join(shared.dir, "dist"), Platforms: []string{hostPlatform()}}
		if testing.Verbose() {
			opts.Log = os.Stderr
		}
		shared.a, shared.err = release.Build(ctx, opts)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.a
}

func version(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func headCommit(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// readIndex opens the layout tarball of a and returns its image index and
// the name it carries.
func readIndex(t *testing.T, a release.Artefacts) (v1.ImageIndex, string) {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(a.ImageLayout)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Uid != 0 || hdr.Gid != 0 || !hdr.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("layout entry %s: owner %d:%d, time %v; want 0:0 at the epoch", hdr.Name, hdr.Uid, hdr.Gid, hdr.ModTime)
		}
		p := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outer, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := outer.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("the layout holds %d entries, want the one index", len(m.Manifests))
	}
	idx, err := outer.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx, m.Manifests[0].Annotations["io.containerd.image.name"]
}

// imageFiles returns the regular files of img's flattened filesystem, with
// their modes.
func imageFiles(t *testing.T, img v1.Image) (map[string][]byte, map[string]int64) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files, modes := map[string][]byte{}, map[string]int64{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, modes
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files["/"+hdr.Name], modes["/"+hdr.Name] = data, hdr.Mode
	}
}

// TestBuildWritesTheDockerfilesImage: for the host's platform, the index
// holds one OCI image whose configuration and files are the Dockerfile's
// (user 65532, jmx-attach as entrypoint, the three files at their paths),
// whose binaries print VERSION and the commit, and whose jar is the
// production agent; the artefacts' sums verify, with this package and
// with sha256sum -c; and a second build gives the same bytes.
func TestBuildWritesTheDockerfilesImage(t *testing.T) {
	v, commit := version(t), headCommit(t)
	a := hostBuild(t)
	if want := release.DefaultRegistry + "/jmx-agent:v" + v; a.ImageRef != want {
		t.Errorf("ImageRef %s, want %s", a.ImageRef, want)
	}
	idx, named := readIndex(t, a)
	if named != a.ImageRef {
		t.Errorf("the layout names the index %q, want %q", named, a.ImageRef)
	}
	if d, _ := idx.Digest(); d.String() != a.IndexDigest {
		t.Errorf("index digest %s, Build said %s", d, a.IndexDigest)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex || len(im.Manifests) != 1 {
		t.Fatalf("index %s with %d manifests, want an OCI index with one", im.MediaType, len(im.Manifests))
	}
	desc := im.Manifests[0]
	if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != runtime.GOARCH {
		t.Errorf("platform %v, want linux/%s", desc.Platform, runtime.GOARCH)
	}
	if im.Annotations["org.opencontainers.image.version"] != "v"+v || im.Annotations["org.opencontainers.image.revision"] != commit {
		t.Errorf("index annotations %v, want version v%s and revision %s", im.Annotations, v, commit)
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("image media type %s, want OCI", mt)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || cf.Config.User != "65532:65532" ||
		strings.Join(cf.Config.Entrypoint, " ") != "/usr/local/bin/jmx-attach" {
		t.Errorf("config: os %s, arch %s, user %q, entrypoint %q; want linux, %s, 65532:65532, /usr/local/bin/jmx-attach",
			cf.OS, cf.Architecture, cf.Config.User, cf.Config.Entrypoint, runtime.GOARCH)
	}

	files, modes := imageFiles(t, img)
	if len(files) != 3 {
		t.Errorf("the image holds %d files, want the Dockerfile's three", len(files))
	}
	for path, mode := range map[string]int64{release.OperatorPath: 0o755, release.JMXAttachPath: 0o755, release.AgentJarPath: 0o644} {
		if _, ok := files[path]; !ok {
			t.Errorf("the image has no %s", path)
		} else if modes[path] != mode {
			t.Errorf("%s has mode %o, want %o", path, modes[path], mode)
		}
	}
	jar, err := jvmtest.AgentJar(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := os.ReadFile(jar); !bytes.Equal(files[release.AgentJarPath], want) {
		t.Errorf("%s is not the production agent jar %s", release.AgentJarPath, jar)
	}
	bin := t.TempDir()
	for path, args := range map[string][]string{release.OperatorPath: {"--version"}, release.JMXAttachPath: {"version"}} {
		exe := filepath.Join(bin, filepath.Base(path))
		if err := os.WriteFile(exe, files[path], 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(exe, args...).CombinedOutput()
		if err != nil {
			t.Errorf("%s %s: %v\n%s", path, args[0], err, out)
			continue
		}
		if !strings.Contains(string(out), " v"+v+" ") || !strings.Contains(string(out), "commit "+commit) {
			t.Errorf("%s %s printed %q, want version v%s and commit %s", path, args[0], out, v, commit)
		}
	}

	names, err := release.VerifySums(a.Sums)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(a.Files()) {
		t.Errorf("SHA256SUMS lists %v, want every artefact of %v", names, a.Files())
	}
	if sha, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command(sha, "-c", release.SumsFile)
		cmd.Dir = a.Dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c %s: %v\n%s", release.SumsFile, err, out)
		}
	}

	again := build(t, release.Options{Platforms: []string{hostPlatform()}})
	if again.IndexDigest != a.IndexDigest {
		t.Errorf("a second build's index is %s, the first's %s", again.IndexDigest, a.IndexDigest)
	}
	first, _ := os.ReadFile(a.Sums)
	second, _ := os.ReadFile(again.Sums)
	if !bytes.Equal(first, second) {
		t.Errorf("two builds of one commit differ:\n%s\n%s", first, second)
	}
}

// TestSumsCatchAChangedArtefact: a changed byte, a missing file and a
// malformed line each fail VerifySums.
func TestSumsCatchAChangedArtefact(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.tgz")
	for _, f := range []string{a, b} {
		if err := os.WriteFile(f, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sums := filepath.Join(dir, release.SumsFile)
	if err := release.WriteSums(sums, a, b); err != nil {
		t.Fatal(err)
	}
	if names, err := release.VerifySums(sums); err != nil || strings.Join(names, ",") != "a.yaml,b.tgz" {
		t.Fatalf("VerifySums = %v, %v; want a.yaml,b.tgz", names, err)
	}
	if err := os.WriteFile(b, []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := release.VerifySums(sums); err == nil {
		t.Error("VerifySums passed a changed file")
	}
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	if _, err := release.VerifySums(sums); err == nil {
		t.Error("VerifySums passed a missing file")
	}
	if err := os.WriteFile(sums, []byte("abc a.yaml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := release.VerifySums(sums); err == nil {
		t.Error("VerifySums passed a malformed line")
	}
}

// spdx is what the tests read of the SBOM.
type spdx struct {
	SPDXVersion string `json:"spdxVersion"`
	Packages    []struct {
		Name         string `json:"name"`
		SPDXID       string `json:"SPDXID"`
		VersionInfo  string `json:"versionInfo"`
		Comment      string `json:"comment"`
		ExternalRefs []struct {
			ReferenceLocator string `json:"referenceLocator"`
		} `json:"externalRefs"`
	} `json:"packages"`
	Relationships []struct {
		From string `json:"spdxElementId"`
		Type string `json:"relationshipType"`
		To   string `json:"relatedSpdxElement"`
	} `json:"relationships"`
}

// TestSBOMListsTheModulesAndTheShadedArtefacts: the SPDX document lists
// k8s.io/client-go at go.mod's version with go.sum's h1 hash, as a
// dependency of the operator's binary, and the jmx_exporter collector at the
// pom's version inside the agent jar, which does hold its classes.
func TestSBOMListsTheModulesAndTheShadedArtefacts(t *testing.T) {
	a := hostBuild(t)
	data, err := os.ReadFile(a.SBOM)
	if err != nil {
		t.Fatal(err)
	}
	var doc spdx
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" {
		t.Errorf("spdxVersion %q", doc.SPDXVersion)
	}
	gomod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var clientGo string
	for line := range strings.Lines(string(gomod)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "k8s.io/client-go" {
			clientGo = f[1]
		}
	}
	gosum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	var h1 string
	for line := range strings.Lines(string(gosum)) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "k8s.io/client-go" && f[1] == clientGo {
			h1 = f[2]
		}
	}
	pom, err := os.ReadFile(filepath.Join(repo, "agent", "pom.xml"))
	if err != nil {
		t.Fatal(err)
	}
	collector := between(string(pom), "<jmx-collector.version>", "</jmx-collector.version>")
	if clientGo == "" || h1 == "" || collector == "" {
		t.Fatalf("client-go %q (h1 %q) in go.mod/go.sum, collector %q in agent/pom.xml", clientGo, h1, collector)
	}

	ids := map[string]string{} // name@version -> SPDX ID
	for _, p := range doc.Packages {
		ids[p.Name+"@"+p.VersionInfo] = p.SPDXID
		if p.Name == "k8s.io/client-go" && p.Comment != "go.sum "+h1 {
			t.Errorf("client-go's comment %q, want go.sum %s", p.Comment, h1)
		}
	}
	goID, mavenID := ids["k8s.io/client-go@"+clientGo], ids["io.prometheus.jmx:collector@"+collector]
	if goID == "" {
		t.Errorf("the SBOM has no k8s.io/client-go %s", clientGo)
	}
	if mavenID == "" {
		t.Errorf("the SBOM has no io.prometheus.jmx:collector %s", collector)
	}
	dependents := map[string]int{}
	for _, r := range doc.Relationships {
		if r.To == goID && r.Type == "DEPENDS_ON" && strings.Contains(r.From, "prometheus-jmx-exporter-operator") {
			dependents[goID]++
		}
		if r.To == mavenID && r.Type == "CONTAINS" && strings.Contains(r.From, "handlerkit-jmx-agent") {
			dependents[mavenID]++
		}
	}
	if dependents[goID] != 1 || dependents[mavenID] != 1 {
		t.Errorf("client-go is a dependency of %d operator binaries (want 1), the collector inside %d jars (want 1)",
			dependents[goID], dependents[mavenID])
	}

	jar, err := jvmtest.AgentJar(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("unzip", "-Z1", jar).Output()
	if err != nil {
		t.Fatalf("unzip -Z1 %s: %v", jar, err)
	}
	if !strings.Contains(string(out), "dev/handlerkit/jmxagent/shaded/io/prometheus/jmx/") {
		t.Errorf("the agent jar holds no shaded io.prometheus.jmx classes, which the SBOM says it contains")
	}
}

func between(s, from, to string) string {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, to)
	return strings.TrimSpace(v)
}

// TestManifestsInstallWithOneApply: each single-file install holds the CRD
// first, then the kustomization's Namespace, then deploy/'s objects as
// internal/manifest builds them, with the operator's image the one built.
func TestManifestsInstallWithOneApply(t *testing.T) {
	const ref = "127.0.0.1:5000/handlerkit/jmx-agent:v9.9.9"
	for _, dir := range []string{"deploy", "deploy/operator/cluster-wide"} {
		t.Run(dir, func(t *testing.T) {
			data, err := release.RenderManifest(filepath.Join(repo, dir), ref)
			if err != nil {
				t.Fatal(err)
			}
			got, err := manifest.Decode(data)
			if err != nil {
				t.Fatal(err)
			}
			want, err := manifest.Build(filepath.Join(repo, dir))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want)+1 {
				t.Fatalf("%d objects, want deploy's %d and a Namespace", len(got), len(want))
			}
			if got[0].GetKind() != "CustomResourceDefinition" || got[1].GetKind() != "Namespace" ||
				got[1].GetName() != "handlerkit-system" {
				t.Errorf("the file starts with %s %s, %s %s; want the CRD, then Namespace handlerkit-system",
					got[0].GetKind(), got[0].GetName(), got[1].GetKind(), got[1].GetName())
			}
			deployments := 0
			for _, o := range got {
				if o.GetKind() != "Deployment" {
					continue
				}
				deployments++
				cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				if img := cs[0].(map[string]any)["image"]; img != ref {
					t.Errorf("Deployment %s runs %v, want %s", o.GetName(), img, ref)
				}
			}
			if deployments != 1 {
				t.Errorf("%d Deployments, want the operator's", deployments)
			}
		})
	}
}

// TestPushSendsTheIndexAndTheChart: a release built for a registry on
// 127.0.0.1 is pushed there (plain HTTP), and the registry then serves the
// same image index, the SBOM as its one referrer, and the chart as Helm's
// OCI artefact; another registry and a changed artefact are refused.
func TestPushSendsTheIndexAndTheChart(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	reg := host + "/handlerkit"
	a := build(t, release.Options{Platforms: []string{hostPlatform()}, Registry: reg})
	if a.ImageRef != reg+"/jmx-agent:v"+version(t) {
		t.Errorf("ImageRef %s", a.ImageRef)
	}
	man, err := os.ReadFile(a.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(man), "image: "+a.ImageRef+"\n") {
		t.Errorf("%s does not run %s", a.Manifest, a.ImageRef)
	}

	ctx := context.Background()
	if _, err := release.Push(ctx, a.Dir, "127.0.0.1:1/other"); err == nil {
		t.Error("Push sent a release built for another registry")
	}
	p, err := release.Push(ctx, a.Dir, reg)
	if err != nil {
		t.Fatal(err)
	}
	if p.ImageDigest != a.IndexDigest || p.ImageRef != a.ImageRef || p.ChartRef != a.ChartRef {
		t.Errorf("Push = %+v, want %s@%s and %s", p, a.ImageRef, a.IndexDigest, a.ChartRef)
	}
	tag, err := name.NewTag(a.ImageRef, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(tag, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); d.String() != a.IndexDigest {
		t.Errorf("the registry serves index %s, the release's is %s", d, a.IndexDigest)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Platform.Architecture != runtime.GOARCH {
		t.Errorf("the pushed index holds %+v", im.Manifests)
	}
	if _, err := idx.Image(im.Manifests[0].Digest); err != nil {
		t.Errorf("the pushed image: %v", err)
	}

	referrers, err := remote.Referrers(tag.Context().Digest(a.IndexDigest), remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	rm, err := referrers.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Manifests) != 1 || rm.Manifests[0].ArtifactType != "application/spdx+json" ||
		rm.Manifests[0].Digest.String() != p.SBOMDigest {
		t.Errorf("the index's referrers are %+v, want the SBOM %s", rm.Manifests, p.SBOMDigest)
	} else {
		sbom, err := remote.Image(tag.Context().Digest(p.SBOMDigest), remote.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := layerBytes(t, sbom), readFile(t, a.SBOM); !bytes.Equal(got, want) {
			t.Errorf("the registry's SBOM (%d bytes) is not %s (%d bytes)", len(got), a.SBOM, len(want))
		}
	}

	chartTag, err := name.NewTag(a.ChartRef, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	chart, err := remote.Image(chartTag, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	m, err := chart.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != "application/vnd.cncf.helm.config.v1+json" || len(m.Layers) != 1 ||
		m.Layers[0].MediaType != "application/vnd.cncf.helm.chart.content.v1.tar+gzip" {
		t.Fatalf("chart artefact: config %s, layers %+v; want Helm's media types", m.Config.MediaType, m.Layers)
	}
	var cfg map[string]any
	raw, err := chart.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil || cfg["name"] != release.ChartName || cfg["version"] != version(t) {
		t.Errorf("chart config %s (%v), want Chart.yaml's name and version", raw, err)
	}
	pushed := layerBytes(t, chart)
	if local := readFile(t, a.Chart); !bytes.Equal(pushed, local) {
		t.Errorf("the registry's chart layer (%d bytes) is not %s (%d bytes)", len(pushed), a.Chart, len(local))
	}

	if err := os.WriteFile(a.Chart, append(pushed, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := release.Push(ctx, a.Dir, reg); err == nil {
		t.Error("Push sent a release whose chart no longer matches SHA256SUMS")
	}
}

// layerBytes is the one layer of an artefact, as stored.
func layerBytes(t *testing.T, img v1.Image) []byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("the artefact has %d layers, want one", len(layers))
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func readFile(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestBuildBothPlatforms: the default platforms give one index with an
// amd64 and an arm64 image, whose binaries are built for their machine and
// whose jar layer is one blob. The binaries are stand-ins
// (UseStandInBinaries): the real commands' first arm64 build takes minutes
// on a cold machine; make release builds them (docs/release.md, "What make
// test proves").
func TestBuildBothPlatforms(t *testing.T) {
	release.UseStandInBinaries(t)
	start := time.Now()
	a := build(t, release.Options{})
	t.Logf("both platforms built in %v", time.Since(start).Round(time.Second))
	idx, _ := readIndex(t, a)
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	if len(im.Manifests) != 2 {
		t.Fatalf("the index holds %d images, want 2", len(im.Manifests))
	}
	jarLayers := map[v1.Hash]bool{}
	for _, d := range im.Manifests {
		arch := d.Platform.Architecture
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if a.PlatformDigests["linux/"+arch] != d.Digest.String() {
			t.Errorf("linux/%s: digest %s, Build said %s", arch, d.Digest, a.PlatformDigests["linux/"+arch])
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != arch {
			t.Errorf("linux/%s image's config says %s", arch, cf.Architecture)
		}
		ls, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		jd, _ := ls[0].Digest()
		jarLayers[jd] = true
		files, _ := imageFiles(t, img)
		for _, path := range []string{release.OperatorPath, release.JMXAttachPath} {
			f, err := elf.NewFile(bytes.NewReader(files[path]))
			if err != nil {
				t.Fatalf("linux/%s %s: %v", arch, path, err)
			}
			if f.Machine != machines[arch] {
				t.Errorf("linux/%s %s is built for %v", arch, path, f.Machine)
			}
		}
	}
	if len(jarLayers) != 1 {
		t.Errorf("the platforms' jar layers are %d blobs, want one", len(jarLayers))
	}
}

// TestTheImageLayoutIsTheDockerfiles: the paths, the user and the
// entrypoint of the release's image are the Dockerfile's (make image) and
// those of the image the tests build (pkg/images/testimages).
func TestTheImageLayoutIsTheDockerfiles(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repo, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	dockerfile := string(data)
	for _, want := range []string{
		"/out/prometheus-jmx-exporter-operator " + release.OperatorPath + "\n",
		"/out/jmx-attach " + release.JMXAttachPath + "\n",
		"/handlerkit-jmx-agent.jar " + release.AgentJarPath + "\n",
		"\nUSER " + release.ImageUser + "\n",
		"\nENTRYPOINT [\"" + release.JMXAttachPath + "\"]\n",
	} {
		if !strings.Contains(dockerfile, want) {
			t.Errorf("the Dockerfile has no %q", want)
		}
	}
	if testimages.AgentJarPath != release.AgentJarPath || testimages.JMXAttachPath != release.JMXAttachPath ||
		testimages.OperatorBinary().Path != release.OperatorPath {
		t.Errorf("the tests' agent image puts its files elsewhere: %s, %s, %s", testimages.AgentJarPath,
			testimages.JMXAttachPath, testimages.OperatorBinary().Path)
	}
}
