package render

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/cli"
	helmregistry "helm.sh/helm/v4/pkg/registry"
)

// releaseCmd runs `go run ./hack/release args...` in the main module, as
// `make release` and `make push` do.
func releaseCmd(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	abs, err := filepath.Abs(repo)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"run", "-trimpath", "./hack/release"}, args...)...)
	cmd.Dir = abs
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("release %s: %v\n%s", args[0], err, stderr.String())
	}
	return string(out)
}

// TestHelmInstallFindsThePushedChart: a release built for and pushed to a
// registry on 127.0.0.1 (hack/release build and push, as make push runs
// them) is found by what `helm install oci://<registry>/charts/<name>
// --version <version> --plain-http` runs to locate the chart (Helm's
// registry client, its tags and pull), and the chart Helm downloads is the
// release's .tgz, which names the registry's image.
func TestHelmInstallFindsThePushedChart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	reg := strings.TrimPrefix(srv.URL, "http://") + "/handlerkit"
	dist := filepath.Join(t.TempDir(), "dist")
	releaseCmd(t, ctx, "build", "-out", dist, "-registry", reg, "-platforms", "linux/"+runtime.GOARCH)
	releaseCmd(t, ctx, "push", "-out", dist, "-registry", reg)

	for _, env := range []string{"HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"} {
		t.Setenv(env, t.TempDir())
	}
	settings := cli.New()
	rc, err := helmregistry.NewClient(helmregistry.ClientOptPlainHTTP(), helmregistry.ClientOptWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := loader.Load(chart)
	if err != nil {
		t.Fatal(err)
	}
	tags, err := rc.Tags(reg + "/charts/" + ch.Metadata.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tags, ch.Metadata.Version) {
		t.Errorf("the registry's chart tags are %v, want %s", tags, ch.Metadata.Version)
	}
	install := action.NewInstall(&action.Configuration{})
	install.SetRegistryClient(rc)
	install.Version = ch.Metadata.Version
	install.PlainHTTP = true
	path, err := install.LocateChart("oci://"+reg+"/charts/"+ch.Metadata.Name, settings)
	if err != nil {
		t.Fatalf("helm install's chart lookup: %v", err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(dist, ch.Metadata.Name+"-"+ch.Metadata.Version+".tgz"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("Helm downloaded %s (%d bytes), not the release's chart (%d bytes)", path, len(got), len(want))
	}
	docs, err := Chart(path, "jmx", "ops", nil)
	if err != nil {
		t.Fatal(err)
	}
	image := reg + "/jmx-agent:" + ch.Metadata.AppVersion
	if !slices.ContainsFunc(docs, func(d string) bool { return strings.Contains(d, image) }) {
		t.Errorf("the downloaded chart runs no %s", image)
	}
}
