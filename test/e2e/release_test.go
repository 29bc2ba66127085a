package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/handlerkit/handlerkit/internal/manifest"
	"github.com/handlerkit/handlerkit/internal/release"
	"github.com/handlerkit/handlerkit/internal/testbuild"
	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
)

// pullCounter is a registry that counts the manifest reads of each
// repository: a read of the release's image is the node pulling it.
type pullCounter struct {
	mu    sync.Mutex
	reads map[string]int // repository → GET .../manifests/... answered
}

func (c *pullCounter) count(repo string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[repo]
}

// startLocalRegistry serves an in-memory OCI registry on loopback, which
// the node's containerd reaches over plain HTTP (it does so for localhost
// only), and returns its host ("localhost:PORT").
func startLocalRegistry(t *testing.T) (string, *pullCounter) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &pullCounter{reads: map[string]int{}}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if repo, _, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v2/"), "/manifests/"); ok && r.Method == http.MethodGet {
			c.mu.Lock()
			c.reads[repo]++
			c.mu.Unlock()
		}
		reg.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return fmt.Sprintf("localhost:%d", lis.Addr().(*net.TCPAddr).Port), c
}

// testLog writes each line it gets to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestAReleaseInstallsFromARegistry (issue 42, "Done when"): what `make
// release` builds (internal/release.Build, for this machine's platform: the
// multi-platform build is internal/release's own test) is pushed by what
// `make push` runs (release.Push) to a registry this test starts on
// loopback, and installed from there on the real node the two ways an admin
// does: the single-file manifest (`kubectl apply -f`) and the packaged chart
// (`helm install oci://...`). Each install pulls the operator's image from
// the registry, names no other, gives a running JVM the agent through an
// ephemeral container of that same image, and its uninstall leaves nothing
// of it behind but the CRD, which is kept on purpose.
func TestAReleaseInstallsFromARegistry(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	host, pulls := startLocalRegistry(t)
	reg := host + "/handlerkit"
	art, err := release.Build(ctx, release.Options{
		Repo:      repoRoot,
		OutDir:    filepath.Join(t.TempDir(), "dist"),
		Registry:  reg,
		Platforms: []string{"linux/" + runtime.GOARCH},
		Log:       testLog{t},
	})
	if err != nil {
		t.Fatalf("release.Build: %v", err)
	}
	pushed, err := release.Push(ctx, art.Dir, reg)
	if err != nil {
		t.Fatalf("release.Push: %v", err)
	}
	if pushed.ImageDigest != art.IndexDigest {
		t.Fatalf("pushed the image as %s, built %s", pushed.ImageDigest, art.IndexDigest)
	}
	imageRepo := strings.TrimPrefix(art.ImageRef[:strings.LastIndex(art.ImageRef, ":")], host+"/")
	runTogether(t, subtest{"manifest", func(t *testing.T) {
		installReleaseManifest(t, art, pulls, imageRepo)
	}}, subtest{"chart", func(t *testing.T) {
		installReleaseChart(t, art, pushed, pulls, imageRepo)
	}})
}

// installReleaseManifest applies the release's single-file install as it is
// (namespace handlerkit-system), less the CRD (in place already, and shared
// with every other test) and the cluster-wide report of unserved exporters
// (it would write the status of other tests' exporters); uses it; deletes
// what it applied, as `kubectl delete -f` less the CRD does; and lists what
// is left.
func installReleaseManifest(t *testing.T, art release.Artefacts, pulls *pullCounter, imageRepo string) {
	ctx := t.Context()
	data, err := os.ReadFile(art.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	all, err := manifest.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 || all[0].GetKind() != "CustomResourceDefinition" {
		t.Fatalf("the install manifest does not start with the CRD: %d objects, the first %s", len(all), kindName(all, 0))
	}
	var objs []*unstructured.Unstructured
	ns := ""
	for _, o := range all {
		switch {
		case o.GetKind() == "CustomResourceDefinition":
		case strings.HasSuffix(o.GetName(), "-unserved") && strings.HasPrefix(o.GetKind(), "ClusterRole"):
		default:
			if o.GetKind() == "Namespace" {
				ns = o.GetName()
			}
			objs = append(objs, o)
		}
	}
	if ns == "" {
		t.Fatalf("the install manifest creates no Namespace: `kubectl apply -f` of it alone cannot work")
	}
	applier, err := manifest.NewApplier(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			_ = applier.Delete(context.Background(), ns, objs...)
		}
	})
	if err := applier.Apply(ctx, ns, objs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dumpOperatorLogs(t, ns) })
	useRelease(t, ns, art, pulls, imageRepo)

	if err := applier.Delete(ctx, ns, objs...); err != nil {
		t.Fatalf("uninstall: %v", err)
	}
	uninstalled = true
	waitFor(t, 3*time.Minute, "namespace "+ns+" gone", func() (bool, string) {
		_, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	left, err := applier.Missing(ctx, ns, all...)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != len(all)-1 {
		gone := map[string]bool{}
		for _, o := range left {
			gone[o.GetKind()+"/"+o.GetName()] = true
		}
		var still []string
		for _, o := range all {
			if k := o.GetKind() + "/" + o.GetName(); !gone[k] {
				still = append(still, k)
			}
		}
		t.Errorf("after the uninstall, %v remain; want only the CRD", still)
	}
}

// installReleaseChart installs the chart from the registry with Helm's own
// install action (test/helm's helm-release), into a namespace of its own,
// with the CRD left to the admin (it is in place, unmanaged by Helm) and the
// report of unserved exporters off (it would write other tests' exporters'
// status); uses it; uninstalls it; and lists what is left.
func installReleaseChart(t *testing.T, art release.Artefacts, pushed release.Pushed, pulls *pullCounter, imageRepo string) {
	ns := newNamespace(t, "e2e-release-helm", nil)
	chartRef, version, ok := strings.Cut(pushed.ChartRef, ":"+art.Version)
	if !ok || version != "" {
		t.Fatalf("chart reference %s does not end in the release's version %s", pushed.ChartRef, art.Version)
	}
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte("crds:\n  enabled: false\nreportUnserved: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const name = "jmx"
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			_, _ = runHelmIn(t, ctx, "-namespace", ns, "-name", name, "uninstall")
		}
	})
	if out, err := runHelm(t, "-namespace", ns, "-name", name, "-chart", "oci://"+chartRef, "-version", art.Version,
		"-plain-http", "-values", values, "install"); err != nil {
		t.Fatalf("helm install oci://%s --version %s: %v", chartRef, art.Version, err)
	} else {
		t.Logf("helm install: %s", firstLine(out))
	}
	t.Cleanup(func() { dumpOperatorLogs(t, ns) })
	useRelease(t, ns, art, pulls, imageRepo)

	before := releaseObjects(t, ns, name)
	if out, err := runHelm(t, "-namespace", ns, "-name", name, "uninstall"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	uninstalled = true
	waitFor(t, 2*time.Minute, "nothing of release "+name+" left", func() (bool, string) {
		left := releaseObjects(t, ns, name)
		return len(left) == 0, fmt.Sprintf("left %v (of %d before)", left, len(before))
	})
}

// useRelease waits for the operator of the install in ns, checks that it
// runs the release's image pulled from the registry, and that an exporter
// gives a running JVM the agent through an ephemeral container of that
// image.
func useRelease(t *testing.T, ns string, art release.Artefacts, pulls *pullCounter, imageRepo string) {
	t.Helper()
	ctx := t.Context()
	waitFor(t, 4*time.Minute, "the operator is ready", func() (bool, string) {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + operatorName})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			for _, c := range p.Status.ContainerStatuses {
				if c.Ready {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%d pods, none ready", len(pods.Items))
	})
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + operatorName})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if img := p.Spec.Containers[0].Image; img != art.ImageRef {
			t.Errorf("operator pod %s runs %s, want the release's %s", p.Name, img, art.ImageRef)
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.Ready && !strings.HasSuffix(c.ImageID, "@"+art.IndexDigest) {
				t.Errorf("operator pod %s runs image %s, want the pushed index %s", p.Name, c.ImageID, art.IndexDigest)
			}
		}
	}
	if pulls.count(imageRepo) == 0 {
		t.Errorf("the registry served no manifest of %s: the node did not pull the release's image", imageRepo)
	}
	labels := map[string]string{"app": "released"}
	createPod(t, ns, jvmPod("jvm", labels, testimages.JVMAppRef))
	waitRunning(t, ns, "jvm")
	createExporter(t, ns, exporter("released", labels))
	checkInjected(t, ns, "released", "jvm", jmxv1alpha1.DefaultPort)
	_, pod := injectedRecord(t, ns, "jvm")
	if len(pod.Spec.EphemeralContainers) != 1 {
		t.Fatalf("%d ephemeral containers, want 1", len(pod.Spec.EphemeralContainers))
	}
	if img := pod.Spec.EphemeralContainers[0].Image; img != art.ImageRef {
		t.Errorf("the ephemeral container runs %s, want the release's image %s", img, art.ImageRef)
	}
	// The exporter's finalizer is the operator's to remove: delete it while
	// the operator runs, as an admin does before an uninstall.
	if err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Delete(ctx, "released", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the exporter deleted", func() (bool, string) {
		_, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Get(ctx, "released", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if err := kube.CoreV1().Pods(ns).Delete(ctx, "jvm", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// releaseObjects lists what an install of release name in ns may leave
// behind: in ns every Secret, ConfigMap, Lease, Service, ServiceAccount,
// Role, RoleBinding and Deployment but those Kubernetes itself puts in every
// namespace; in the cluster every ClusterRole, ClusterRoleBinding and
// MutatingWebhookConfiguration labelled with the release.
func releaseObjects(t *testing.T, ns, name string) []string {
	t.Helper()
	ctx := t.Context()
	all := metav1.ListOptions{}
	release := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name}
	var out []string
	add := func(kind string, err error, items func(func(metav1.Object))) {
		if err != nil {
			t.Fatalf("list %s: %v", kind, err)
		}
		items(func(o metav1.Object) {
			if n := o.GetName(); n != "kube-root-ca.crt" && n != "default" {
				out = append(out, kind+"/"+n)
			}
		})
	}
	secrets, err := kube.CoreV1().Secrets(ns).List(ctx, all)
	add("Secret", err, func(f func(metav1.Object)) { each(secrets.Items, f) })
	cms, err := kube.CoreV1().ConfigMaps(ns).List(ctx, all)
	add("ConfigMap", err, func(f func(metav1.Object)) { each(cms.Items, f) })
	leases, err := kube.CoordinationV1().Leases(ns).List(ctx, all)
	add("Lease", err, func(f func(metav1.Object)) { each(leases.Items, f) })
	svcs, err := kube.CoreV1().Services(ns).List(ctx, all)
	add("Service", err, func(f func(metav1.Object)) { each(svcs.Items, f) })
	sas, err := kube.CoreV1().ServiceAccounts(ns).List(ctx, all)
	add("ServiceAccount", err, func(f func(metav1.Object)) { each(sas.Items, f) })
	roles, err := kube.RbacV1().Roles(ns).List(ctx, all)
	add("Role", err, func(f func(metav1.Object)) { each(roles.Items, f) })
	rbs, err := kube.RbacV1().RoleBindings(ns).List(ctx, all)
	add("RoleBinding", err, func(f func(metav1.Object)) { each(rbs.Items, f) })
	deps, err := kube.AppsV1().Deployments(ns).List(ctx, all)
	add("Deployment", err, func(f func(metav1.Object)) { each(deps.Items, f) })
	crs, err := kube.RbacV1().ClusterRoles().List(ctx, release)
	add("ClusterRole", err, func(f func(metav1.Object)) { each(crs.Items, f) })
	crbs, err := kube.RbacV1().ClusterRoleBindings().List(ctx, release)
	add("ClusterRoleBinding", err, func(f func(metav1.Object)) { each(crbs.Items, f) })
	mwcs, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, release)
	add("MutatingWebhookConfiguration", err, func(f func(metav1.Object)) { each(mwcs.Items, f) })
	return out
}

// each calls f with a pointer to every item of a typed list.
func each[T any, P interface {
	*T
	metav1.Object
}](items []T, f func(metav1.Object)) {
	for i := range items {
		f(P(&items[i]))
	}
}

// runHelm runs test/helm's helm-release (Helm's own install, upgrade and
// uninstall actions) against the test cluster, within the test's context.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runHelmIn(t, t.Context(), args...)
}

// runHelmIn is runHelm within ctx: a cleanup, which runs once the test's
// context has ended, passes its own.
func runHelmIn(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	helmRelease.once.Do(func() {
		dir, err := os.MkdirTemp("", "handlerkit-e2e-helm-")
		if err != nil {
			helmRelease.err = err
			return
		}
		helmRelease.dir = dir
		bins, err := testbuild.Build(context.Background(), filepath.Join(repoRoot, "test", "helm"), dir, testbuild.Flags(), nil,
			"./cmd/helm-release")
		if err != nil {
			helmRelease.err = fmt.Errorf("building test/helm's helm-release: %w", err)
			return
		}
		helmRelease.bin = bins[0]
	})
	if helmRelease.err != nil {
		t.Fatal(helmRelease.err)
	}
	kubeconfig, err := env.KubeconfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, helmRelease.bin, append([]string{"-kubeconfig", kubeconfig, "-timeout", "3m"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// removeHelmRelease deletes the built helm-release (TestMain, at the end).
func removeHelmRelease() {
	if helmRelease.dir != "" {
		_ = os.RemoveAll(helmRelease.dir)
	}
}

// helmRelease is test/helm's helm-release, built once per test binary.
var helmRelease struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// kindName names objs[i] for a message.
func kindName(objs []*unstructured.Unstructured, i int) string {
	if i >= len(objs) {
		return "none"
	}
	return objs[i].GetKind() + "/" + objs[i].GetName()
}
