package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
)

// imageJavaOptions is what the image of TestAtStartKeepsTheImagesJavaToolOptions sets.
const imageJavaOptions = "-Dmarker=1 -Xmx40m"

// TestAtStartKeepsTheImagesJavaToolOptions (issue 40, item 2): the JVM image
// with ENV JAVA_TOOL_OPTIONS="-Dmarker=1 -Xmx40m", loaded in the node's
// containerd and served by a registry this test starts on the pod bridge's
// gateway (the operator's pod reaches it there), run by a pod that sets no
// JAVA_TOOL_OPTIONS, under an AtStart exporter: the webhook reads the image's
// config from the registry, and the pod's JVM picks up both the image's
// options and the agent: the marker and -Xmx40m (the agent's heap maximum)
// apply, and the agent serves.
func TestAtStartKeepsTheImagesJavaToolOptions(t *testing.T) {
	t.Parallel()
	op := deployAtStartOperator(t, "e2e-imageenv") // its pod brings the pod bridge up
	ref, reads := serveImageWithJavaOptions(t)
	labels := map[string]string{"app": "imageopts"}
	createExporter(t, op.ns, exporter("imageopts", labels, withMode(jmxv1alpha1.InjectionModeAtStart)))
	waitWebhookInjects(t, op.ns, labels, "imageopts")

	pod := jvmPod("imageopts", labels, ref)
	pod.Spec.Containers[0].Env = nil // the image's value is the only one
	createPod(t, op.ns, pod)
	got, body := servedFromStart(t, op.ns, "imageopts", "imageopts", 2*time.Second)
	if reads.Load() == 0 {
		t.Errorf("the registry served no manifest of %s: the webhook did not read the image's config", ref)
	}
	rec := atStartRecord(t, got)
	want := imageJavaOptions + " " + atstart.AgentOption(atstart.MountPath+testimages.AgentJarPath, rec.Port)
	var value string
	for _, e := range got.Spec.Containers[0].Env {
		if e.Name == atstart.JavaToolOptions {
			value = e.Value
		}
	}
	if value != want {
		t.Errorf("JAVA_TOOL_OPTIONS %q, want %q (notes %q)", value, want, got.Annotations[atstart.AnnotationNotes])
	}
	// The JVM read the whole value, the image's options and the agent's.
	if logs := containerLogs(t, op.ns, "imageopts", "app"); !strings.Contains(logs, "Picked up JAVA_TOOL_OPTIONS: "+want) {
		t.Errorf("the JVM's log does not show it picked up %q:\n%s", want, logs)
	}
	// And applied the image's heap limit (the JVM's default here would be a
	// quarter of the machine's memory).
	heapMax, ok := metricValue(body, `jvm_memory_max_bytes{area="heap"}`)
	if !ok || heapMax <= 0 || heapMax > 40<<20 {
		t.Errorf("jvm_memory_max_bytes{area=\"heap\"} = %v (found %v), want at most the image's -Xmx40m", heapMax, ok)
	}
	waitCondition(t, op.ns, "imageopts", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected, 2*time.Minute)
}

// serveImageWithJavaOptions makes the JVM application image with
// ENV JAVA_TOOL_OPTIONS=imageJavaOptions, loads it into the node's containerd
// as <registry>/handlerkit/jvm-app-imageopts:v1, and serves its manifest and
// config from a registry (go-containerregistry's) on the pod bridge's
// gateway address, for the test's life. It returns the reference and the
// count of the manifest reads the registry served.
func serveImageWithJavaOptions(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	cidr := env.PodCIDR()
	if cidr == "" {
		t.Fatal("no pod network")
	}
	gateway := strings.TrimSuffix(cidr, ".0/24") + ".1" // the bridge's address (the CNI plugin's isGateway)
	lis, err := net.Listen("tcp", net.JoinHostPort(gateway, "0"))
	if err != nil {
		t.Fatalf("listen on the pod bridge's gateway %s: %v", gateway, err)
	}
	var reads atomic.Int64
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/manifests/") {
			reads.Add(1)
		}
		reg.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	ref := lis.Addr().String() + "/handlerkit/jvm-app-imageopts:v1"

	cache, err := testimages.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	base, err := testimages.BuildJVMApp(t.Context(), cache, cache, sampleApp) // the suite's, from the cache
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(base.File, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg := *cf.Config.DeepCopy()
	cfg.Env = append(cfg.Env, atstart.JavaToolOptions+"="+imageJavaOptions)
	if img, err = mutate.Config(img, cfg); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "jvm-app-imageopts.tar")
	if err := images.WriteDockerArchive(file, ref, img); err != nil {
		t.Fatal(err)
	}
	if err := env.LoadImageArchive(t.Context(), file); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(file)
	// The registry gets the image's manifest and config, which is all the
	// webhook reads; the node runs the copy loaded above (imagePullPolicy
	// Never), so the layers need not travel twice.
	if err := pushManifestAndConfig(t.Context(), ref, img); err != nil {
		t.Fatal(err)
	}
	return ref, &reads
}

// pushManifestAndConfig writes img's config blob and manifest (not its
// layers) to ref's registry.
func pushManifestAndConfig(ctx context.Context, ref string, img v1.Image) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	if m.Config.MediaType == "" {
		return errors.New("the image's manifest names no config media type")
	}
	config := static.NewLayer(raw, types.MediaType(m.Config.MediaType))
	if err := remote.WriteLayer(r.Context(), config, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("push the config of %s: %w", ref, err)
	}
	if err := remote.Put(r, img, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("push the manifest of %s: %w", ref, err)
	}
	return nil
}
