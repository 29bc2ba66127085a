// Command demo is `make demo`: the PrometheusJmxExporter operator loading the
// real jmx_exporter agent into a running JVM, on a real local cluster, with no
// Docker and no cluster of your own.
//
// It starts a local cluster (pkg/testenv: control plane, a real node with
// containerd and runc, Services through a real kube-proxy), loads the images
// that `make images` built, installs the CRD, deploys the operator from
// deploy/overlays/local (its ServiceAccount, RBAC and Deployment, running in
// the cluster), starts the sample Java application and applies the sample
// exporter from deploy/samples. It waits until the exporter's status lists
// the JVM's endpoint, scrapes it and prints a few JVM metrics. Then it
// switches the exporter to mode Both and scales the application to a second
// pod, which the operator's admission webhook gives the agent at its
// creation: it waits until that pod's JVM is listed injected AtStart and
// prints its first scrape (no attach, no ephemeral container). Then it starts a
// real Prometheus (pkg/testenv/prometheus) with the community chart's
// kubernetes-pods job and prints a PromQL query it answers for both JVMs,
// and the kubectl and curl lines to try; then it runs until Ctrl-C and
// removes everything it started.
//
// With KUBECONFIG set, it uses that cluster instead of starting one: the
// images must be available there (see docs/operator.md). At the end it
// removes from that cluster exactly what it created (the samples, the
// operator, the namespace and the CRD when they were not there before), and
// nothing else.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/handlerkit/handlerkit/internal/manifest"
	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
	"github.com/handlerkit/handlerkit/pkg/testenv"
	"github.com/handlerkit/handlerkit/pkg/testenv/prometheus"
)

func main() {
	os.Exit(demo())
}

// demo runs the demo and returns its exit status. It returns, rather than
// exits, so that the terminal is given back on every path (see
// takeForeground).
func demo() int {
	// SIGINT is caught from before the demo takes the terminal until after
	// it gives it back (the deferred calls run last first), so that no
	// Ctrl-C finds it in the foreground without its handler.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fg, err := takeForeground()
	if err != nil {
		// The demo still runs, as it would without a terminal.
		fmt.Fprintln(os.Stderr, "demo: Ctrl-C will reach make too:", err)
	}
	defer func() {
		if err := fg.restore(); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
		}
	}()
	err = run(ctx)
	stopped := ctx.Err() != nil
	switch {
	case err != nil && stopped:
		// Ctrl-C before the demo was up: what it started is cleaned up
		// already (run's deferred cleanups), which is the stop asked for.
		fmt.Fprintln(os.Stderr, "demo: stopped before it was ready:", err)
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	return 0
}

func step(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}

// run is the demo; ctx ends on Ctrl-C or SIGTERM.
func run(ctx context.Context) error {
	timeout := flag.Duration("timeout", 10*time.Minute, "how long to wait for each step")
	exitAfter := flag.Bool("exit", false, "stop after printing the metrics instead of waiting for Ctrl-C (for tests)")
	idle := flag.Bool("idle", false, "start nothing: wait for Ctrl-C as the demo does once it runs, and stop the same way (for the test of make demo's Ctrl-C)")
	flag.Parse()
	if *idle {
		return waitForStop(ctx)
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}

	cfg, kubeconfig, local, cleanup, err := cluster(ctx, root)
	if err != nil {
		return err
	}
	defer cleanup()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	jmx, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	applier, err := manifest.NewApplier(cfg)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	step("installing the operator from deploy/overlays/local (CRD, ServiceAccount, RBAC, Deployment)")
	objs, err := manifest.Build(filepath.Join(root, "deploy", "overlays", "local"))
	if err != nil {
		return err
	}
	ns := ""
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			ns = o.GetNamespace()
		}
	}
	samples, err := manifest.Build(filepath.Join(root, "deploy", "samples"))
	if err != nil {
		return err
	}
	if !local {
		// On a cluster the demo did not start, it removes at the end exactly
		// what it created, and nothing that was there before.
		created, err := applier.Missing(wctx, ns, append(append([]*unstructured.Unstructured{}, objs...), samples...)...)
		if err != nil {
			return err
		}
		nsCreated := false
		defer func() { teardown(applier, kube, ns, created, nsCreated) }()
		if err := createNamespace(wctx, kube, ns, &nsCreated); err != nil {
			return err
		}
	} else if err := createNamespace(wctx, kube, ns, nil); err != nil {
		return err
	}
	if err := waitServiceAccount(wctx, kube, ns); err != nil {
		return err
	}
	if err := applyWithRetry(wctx, applier, ns, objs); err != nil {
		return err
	}
	step("waiting for the operator (2 replicas, one leader) to be ready in namespace %s", ns)
	if err := waitDeployment(wctx, kube, ns, "prometheus-jmx-exporter-operator"); err != nil {
		return err
	}

	step("starting the sample Java application and applying the sample exporter (deploy/samples)")
	if err := applyWithRetry(wctx, applier, ns, samples); err != nil {
		return err
	}
	if err := waitDeployment(wctx, kube, ns, "orders"); err != nil {
		return err
	}
	step("waiting for the operator to load the agent into the running JVM (no restart)")
	ep, err := waitEndpoint(wctx, jmx, ns, "orders")
	if err != nil {
		return err
	}
	fmt.Printf("    endpoint: pod %s container %s JVM %s (pid %d) at http://%s:%d/metrics, injected %s\n",
		ep.Pod, ep.Container, ep.JVM, ep.PID, ep.PodIP, ep.Port, ep.InjectedAt.Format(time.RFC3339))

	step("scraping the JVM's metrics through the API server's pod proxy")
	body, err := scrapeThroughProxy(wctx, kube, ns, ep)
	if err != nil {
		return err
	}
	printMetrics(body)

	started, err := demoAtStart(wctx, kube, jmx, ns, ep)
	if err != nil {
		return err
	}

	promURL := ""
	if local {
		step("starting Prometheus %s with the community chart's kubernetes-pods job (deploy/prometheus/kubernetes-pods.yaml)", testenv.PrometheusVersion)
		srv, err := startPrometheus(wctx, root, kubeconfig)
		if err != nil {
			return err
		}
		defer srv.Stop()
		promURL = srv.URL()
		if err := printPrometheusQuery(wctx, srv, ns, ep, started); err != nil {
			return err
		}
	} else {
		fmt.Println("    (no Prometheus: it would run on this machine, which cannot reach the pod IPs of another cluster)")
	}

	fmt.Printf(`
Try it (the cluster runs until you press Ctrl-C):

  export KUBECONFIG=%s
  kubectl get pje -n %[2]s
  kubectl get pje orders -n %[2]s -o yaml                 # status: conditions and metricsEndpoints
  kubectl describe pod -n %[2]s -l app=orders             # the ephemeral container and the annotations
  kubectl get events -n %[2]s --sort-by=.lastTimestamp
  kubectl get --raw /api/v1/namespaces/%[2]s/pods/%[3]s:%[4]d/proxy/metrics | head
  kubectl logs -n %[2]s deploy/prometheus-jmx-exporter-operator
  kubectl get pod -n %[2]s %[6]s -o jsonpath='{.metadata.annotations.jmx\.handlerkit\.dev/injected-at-start}'
  kubectl logs -n %[2]s %[6]s | head -3                     # the agent's line at the JVM's start
  kubectl delete pod -n %[2]s -l app=orders               # new pods get the agent at their start
%[5]s
`, kubeconfig, ns, ep.Pod, ep.Port, prometheusLines(promURL, ns), started.Pod)
	if *exitAfter {
		return nil
	}
	return waitForStop(ctx)
}

// demoAtStart shows the other half of an exporter: it switches the sample
// exporter to mode Both (the attached JVM keeps its agent), scales the sample
// application to two replicas, and waits for the new pod, created after the
// exporter, to be listed injected AtStart: the operator's admission webhook
// gave it the agent in JAVA_TOOL_OPTIONS when it was created, so its JVM
// serves metrics from its first second, with no ephemeral container and no
// attach. It prints the pod's record and the time from the pod's creation to
// its first scrape, and returns the pod's endpoint.
func demoAtStart(ctx context.Context, kube kubernetes.Interface, jmx versioned.Interface, ns string, attached jmxv1alpha1.MetricsEndpoint) (jmxv1alpha1.MetricsEndpoint, error) {
	step("switching the exporter to spec.injection.mode Both: running pods stay attached, pods created from now on get the agent at start")
	patch := fmt.Sprintf(`{"spec":{"injection":{"mode":%q}}}`, jmxv1alpha1.InjectionModeBoth)
	if _, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Patch(ctx, "orders", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return jmxv1alpha1.MetricsEndpoint{}, err
	}
	step("scaling the sample application to 2 replicas: a pod created after the exporter, through the operator's admission webhook")
	scale := []byte(`{"spec":{"replicas":2}}`)
	if _, err := kube.AppsV1().Deployments(ns).Patch(ctx, "orders", types.MergePatchType, scale, metav1.PatchOptions{}); err != nil {
		return jmxv1alpha1.MetricsEndpoint{}, err
	}
	var pod *corev1.Pod
	err := poll(ctx, "the new pod", func() (bool, error) {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=orders"})
		if err != nil {
			return false, nil
		}
		for i := range pods.Items {
			if p := &pods.Items[i]; p.Name != attached.Pod && p.DeletionTimestamp == nil {
				pod = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return jmxv1alpha1.MetricsEndpoint{}, err
	}
	record, ok := pod.Annotations[atstart.AnnotationInjected]
	if !ok {
		return jmxv1alpha1.MetricsEndpoint{}, fmt.Errorf("pod %s was created without the agent (no %s annotation): is the webhook reachable? "+
			"kubectl logs -n %s deploy/prometheus-jmx-exporter-operator | grep webhook", pod.Name, atstart.AnnotationInjected, ns)
	}
	fmt.Printf("    pod %s, created %s, injected at creation: %s\n", pod.Name, pod.CreationTimestamp.Format(time.RFC3339), record)
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == atstart.JavaToolOptions {
				fmt.Printf("    container %s: JAVA_TOOL_OPTIONS=%s\n", c.Name, e.Value)
			}
		}
	}
	step("waiting for the exporter to list the new pod's JVM, injected AtStart")
	var ep jmxv1alpha1.MetricsEndpoint
	err = poll(ctx, "the new pod's endpoint in the exporter's status", func() (bool, error) {
		ex, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Get(ctx, "orders", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range ex.Status.MetricsEndpoints {
			if e.Pod == pod.Name && e.InjectedBy == jmxv1alpha1.InjectedByAtStart {
				ep = e
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return jmxv1alpha1.MetricsEndpoint{}, err
	}
	body, err := scrapeThroughProxy(ctx, kube, ns, ep)
	if err != nil {
		return jmxv1alpha1.MetricsEndpoint{}, err
	}
	scraped := time.Now()
	p, err := kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return jmxv1alpha1.MetricsEndpoint{}, err
	}
	fmt.Printf("    endpoint: pod %s container %s at http://%s:%d/metrics, injectedBy %s; %d ephemeral containers (no attach)\n",
		ep.Pod, ep.Container, ep.PodIP, ep.Port, ep.InjectedBy, len(p.Spec.EphemeralContainers))
	fmt.Printf("    scraped %s after the pod was created (the image started, the JVM started with the agent)\n",
		scraped.Sub(pod.CreationTimestamp.Time).Round(time.Second))
	printMetrics(body)
	return ep, nil
}

// waitForStop runs until Ctrl-C (or SIGTERM). A stop asked for is a clean
// end: the deferred cleanups run and the demo exits 0, so that `make demo`
// reports no error.
func waitForStop(ctx context.Context) error {
	step("running; press Ctrl-C to stop and remove everything")
	<-ctx.Done()
	step("stopping")
	return nil
}

// createNamespace creates ns unless it exists, and sets *created when it
// did.
func createNamespace(ctx context.Context, kube kubernetes.Interface, ns string, created *bool) error {
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err == nil && created != nil {
		*created = true
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// teardown removes from a cluster the demo did not start what it created
// there, newest first, so that the sample exporter goes while the operator
// still runs and its finalizer clears the pods' annotations; then the
// namespace, if the demo created it.
func teardown(a *manifest.Applier, kube kubernetes.Interface, ns string, created []*unstructured.Unstructured, nsCreated bool) {
	if len(created) == 0 && !nsCreated {
		return
	}
	step("removing what the demo created in the cluster (%d objects)", len(created))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := a.Delete(ctx, ns, created...); err != nil {
		fmt.Fprintln(os.Stderr, "demo: cleanup:", err)
	}
	if !nsCreated {
		return
	}
	step("deleting namespace %s", ns)
	if err := kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		fmt.Fprintln(os.Stderr, "demo: cleanup:", err)
	}
}

// demoQuery is the PromQL the demo asks Prometheus: the sample JVM's heap.
func demoQuery(ns string) string {
	return fmt.Sprintf(`jvm_memory_used_bytes{job="kubernetes-pods", namespace=%q, app="orders", area="heap"}`, ns)
}

// startPrometheus starts a real Prometheus on 127.0.0.1 with the kubernetes-pods
// job of deploy/prometheus, finding the pods through kubeconfig.
func startPrometheus(ctx context.Context, root, kubeconfig string) (*prometheus.Server, error) {
	data, err := os.ReadFile(filepath.Join(root, "deploy", "prometheus", "kubernetes-pods.yaml"))
	if err != nil {
		return nil, err
	}
	var jobs []any
	if err := yaml.Unmarshal(data, &jobs); err != nil {
		return nil, fmt.Errorf("deploy/prometheus/kubernetes-pods.yaml: %w", err)
	}
	config, err := yaml.Marshal(map[string]any{
		"global":         map[string]any{"scrape_interval": "5s", "evaluation_interval": "5s"},
		"scrape_configs": jobs,
	})
	if err != nil {
		return nil, err
	}
	return prometheus.Start(ctx, config, prometheus.WithKubeconfig(kubeconfig))
}

// printPrometheusQuery waits until Prometheus has scraped every endpoint's
// JVM (the attached one and the one injected at start, both found through
// their pods' prometheus.io annotations) and prints the query, its answer and
// the targets.
func printPrometheusQuery(ctx context.Context, srv *prometheus.Server, ns string, eps ...jmxv1alpha1.MetricsEndpoint) error {
	q := demoQuery(ns)
	var samples []prometheus.Sample
	err := poll(ctx, "Prometheus to scrape the JVMs", func() (bool, error) {
		got, err := srv.Query(ctx, q)
		if err != nil {
			return false, nil
		}
		samples = got
		for _, ep := range eps {
			if !slices.ContainsFunc(samples, func(s prometheus.Sample) bool { return s.Metric["pod"] == ep.Pod }) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("    PromQL: %s\n", q)
	for _, smp := range samples {
		fmt.Printf("    => %.1f MiB on pod %s (instance %s), scraped %s\n", smp.Value/(1<<20), smp.Metric["pod"], smp.Metric["instance"],
			smp.Time.Format(time.RFC3339))
	}
	up, err := srv.Query(ctx, fmt.Sprintf(`up{job="kubernetes-pods", namespace=%q}`, ns))
	if err != nil {
		return err
	}
	for _, smp := range up {
		how := ""
		for _, ep := range eps {
			if ep.Pod == smp.Metric["pod"] {
				how = fmt.Sprintf(", injected by %s", ep.InjectedBy)
			}
		}
		fmt.Printf("    up{pod=%q, instance=%q} = %g  (found through the pod's prometheus.io annotations%s)\n",
			smp.Metric["pod"], smp.Metric["instance"], smp.Value, how)
	}
	return nil
}

// prometheusLines are the lines to try against the demo's Prometheus.
func prometheusLines(url, ns string) string {
	if url == "" {
		return ""
	}
	return fmt.Sprintf(`
Prometheus' HTTP API: %[1]s/api/v1 (targets: %[1]s/api/v1/targets)
  curl -s %[1]s/api/v1/query --data-urlencode 'query=%[2]s'
  curl -s %[1]s/api/v1/targets?state=active
`, url, demoQuery(ns))
}

// repoRoot finds the module root (the demo runs with `go run ./hack/demo`).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "deploy", "overlays", "local", "kustomization.yaml")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("run from the handlerkit checkout (no deploy/overlays/local above %s)", dir)
		}
	}
}

// cluster returns the demo's cluster: $KUBECONFIG's, or a local one started
// now (local; stopped by cleanup) with the images loaded.
func cluster(ctx context.Context, root string) (_ *rest.Config, kubeconfig string, local bool, cleanup func(), err error) {
	if kc := os.Getenv("KUBECONFIG"); kc != "" {
		step("using the cluster of KUBECONFIG=%s (the images must be there: see docs/operator.md)", kc)
		cfg, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			return nil, "", false, nil, err
		}
		return cfg, kc, false, func() {}, nil
	}
	step("starting a local cluster: etcd, kube-apiserver, controller-manager, scheduler, kube-proxy, containerd, kubelet")
	start := time.Now()
	env, err := testenv.Start(ctx, testenv.WithServiceProxy())
	if err != nil {
		return nil, "", false, nil, err
	}
	cleanup = func() {
		step("stopping the local cluster and removing its files")
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "demo: stop:", err)
		}
	}
	fmt.Printf("    cluster ready in %s\n", time.Since(start).Round(time.Second))
	step("loading the images that `make images` built (operator + jmx-attach + jmx_exporter %s, the Java app)", jvmtest.JMXExporterVersion)
	archives, err := imageArchives(ctx)
	if err != nil {
		cleanup()
		return nil, "", false, nil, err
	}
	for _, a := range archives {
		if err := env.LoadImageArchive(ctx, a); err != nil {
			cleanup()
			return nil, "", false, nil, err
		}
	}
	if _, err := env.InstallCRDsFromDir(ctx, filepath.Join(root, "deploy", "crds")); err != nil {
		cleanup()
		return nil, "", false, nil, err
	}
	kc, err := env.KubeconfigFile()
	if err != nil {
		cleanup()
		return nil, "", false, nil, err
	}
	return env.Config(), kc, true, cleanup, nil
}

// imageArchives are the archives `make images` left in the image cache.
func imageArchives(ctx context.Context) ([]string, error) {
	cache, err := testimages.DefaultCacheDir()
	if err != nil {
		return nil, err
	}
	agent := filepath.Join(cache, "jmx-agent.tar")
	apps, _ := filepath.Glob(filepath.Join(cache, "jvm-app-[0-9a-f]*.tar"))
	if _, err := os.Stat(agent); err != nil || len(apps) == 0 {
		return nil, fmt.Errorf("no images in %s: run `make images` first (make demo does)", cache)
	}
	sort.Slice(apps, func(i, j int) bool { return modTime(apps[i]).After(modTime(apps[j])) })
	return []string{agent, apps[0]}, nil
}

func modTime(f string) time.Time {
	info, err := os.Stat(f)
	if err != nil {
		return time.Time{}
	}
	return info.ModTime()
}

func waitServiceAccount(ctx context.Context, kube kubernetes.Interface, ns string) error {
	return poll(ctx, "the namespace's default ServiceAccount", func() (bool, error) {
		_, err := kube.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// applyWithRetry applies objs, retrying while a just-installed CRD is not
// served yet.
func applyWithRetry(ctx context.Context, a *manifest.Applier, ns string, objs []*unstructured.Unstructured) error {
	var last error
	err := poll(ctx, "applying the manifests", func() (bool, error) {
		last = a.Apply(ctx, ns, objs...)
		return last == nil, nil
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

func waitDeployment(ctx context.Context, kube kubernetes.Interface, ns, name string) error {
	var d *appsv1.Deployment
	return poll(ctx, "deployment "+name, func() (bool, error) {
		var err error
		d, err = kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		return d.Status.ReadyReplicas >= 1 && d.Status.AvailableReplicas >= 1 && d.Status.UpdatedReplicas >= want, nil
	})
}

func waitEndpoint(ctx context.Context, jmx versioned.Interface, ns, name string) (jmxv1alpha1.MetricsEndpoint, error) {
	var ep jmxv1alpha1.MetricsEndpoint
	last := ""
	err := poll(ctx, "an endpoint in the exporter's status", func() (bool, error) {
		ex, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range ex.Status.Conditions {
			if line := fmt.Sprintf("    %s=%s %s", c.Type, c.Status, c.Reason); c.Type == jmxv1alpha1.ConditionReady && line != last {
				fmt.Println(line + ": " + c.Message)
				last = line
			}
		}
		if len(ex.Status.MetricsEndpoints) > 0 {
			ep = ex.Status.MetricsEndpoints[0]
			return true, nil
		}
		return false, nil
	})
	return ep, err
}

func scrapeThroughProxy(ctx context.Context, kube kubernetes.Interface, ns string, ep jmxv1alpha1.MetricsEndpoint) (string, error) {
	var body []byte
	err := poll(ctx, "the first scrape", func() (bool, error) {
		b, err := kube.CoreV1().Pods(ns).ProxyGet("http", ep.Pod, fmt.Sprint(ep.Port), "/metrics", nil).DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		body = b
		return true, nil
	})
	return string(body), err
}

// printMetrics prints a few JVM series of the scrape.
func printMetrics(body string) {
	want := []string{"jvm_memory_used_bytes", "jvm_threads_current", "jvm_classes_currently_loaded", "jvm_gc_collection_seconds_count",
		"jmx_exporter_build_info", "dev_handlerkit_sample"}
	shown := 0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		for _, w := range want {
			if strings.HasPrefix(strings.ToLower(line), w) && shown < 12 {
				fmt.Println("    " + line)
				shown++
				break
			}
		}
	}
	fmt.Printf("    (%d lines in all)\n", strings.Count(body, "\n"))
}

// poll runs cond every second until it holds or ctx ends.
func poll(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("timed out waiting for %s", what)
			}
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
