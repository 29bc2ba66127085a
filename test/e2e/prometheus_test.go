package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/testenv/prometheus"
)

// scrapeInterval is the tests' Prometheus scrape and evaluation interval.
const scrapeInterval = "2s"

// promConfig is a prometheus.yml with the tests' intervals and jobs.
func promConfig(t *testing.T, jobs []any) []byte {
	t.Helper()
	out, err := yaml.Marshal(map[string]any{
		"global":         map[string]any{"scrape_interval": scrapeInterval, "evaluation_interval": scrapeInterval},
		"scrape_configs": jobs,
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// chartJobs reads deploy/prometheus/kubernetes-pods.yaml, the community
// chart's kubernetes-pods job.
func chartJobs(t *testing.T) []any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "prometheus", "kubernetes-pods.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var jobs []any
	if err := yaml.Unmarshal(data, &jobs); err != nil {
		t.Fatal(err)
	}
	return jobs
}

// startPrometheus starts a real Prometheus on the host with config; its
// in-cluster Kubernetes discovery reaches the cluster through the admin
// kubeconfig. It logs the server's log tail when the test failed.
func startPrometheus(t *testing.T, config []byte) *prometheus.Server {
	t.Helper()
	kubeconfig, err := env.KubeconfigFile()
	if err != nil {
		t.Fatal(err)
	}
	srv := prometheus.New(t, config, prometheus.WithKubeconfig(kubeconfig))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus log:\n%s", srv.LogTail(40))
		}
	})
	return srv
}

// targetsIn returns the active targets whose namespace label is ns.
func targetsIn(t *testing.T, srv *prometheus.Server, ns string) []prometheus.Target {
	t.Helper()
	all, err := srv.Targets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []prometheus.Target
	for _, tg := range all {
		if tg.Labels["namespace"] == ns {
			out = append(out, tg)
		}
	}
	return out
}

// droppedPods returns the names of the pods of ns among the targets that
// discovery found and relabeling dropped, in job.
func droppedPods(t *testing.T, srv *prometheus.Server, ns, job string) map[string]bool {
	t.Helper()
	dropped, err := srv.DroppedTargets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, d := range dropped {
		if d.ScrapePool == job && d.DiscoveredLabels["__meta_kubernetes_namespace"] == ns {
			out[d.DiscoveredLabels["__meta_kubernetes_pod_name"]] = true
		}
	}
	return out
}

// query runs promql and fails the test on an error.
func query(t *testing.T, srv *prometheus.Server, promql string) []prometheus.Sample {
	t.Helper()
	got, err := srv.Query(t.Context(), promql)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func describeSamples(samples []prometheus.Sample) string {
	var parts []string
	for _, s := range samples {
		parts = append(parts, fmt.Sprintf("%v=%g", s.Metric, s.Value))
	}
	sort.Strings(parts)
	return "[" + strings.Join(parts, " ") + "]"
}

// echoPod is a pod without a JVM: the echo server.
func echoPod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers:                    []corev1.Container{{Name: "echo", Image: testimages.EchoRef, ImagePullPolicy: corev1.PullNever}},
		},
	}
}

// TestPrometheusScrapesInjectedPodsThroughTheAnnotations loads the community
// Helm chart's kubernetes-pods job, unchanged, into a real Prometheus: it
// finds the injected JVM through the operator's prometheus.io annotations and
// scrapes jmx_exporter's series from it (up == 1), while the JVM the exporter
// does not select and a selected pod without a JVM are discovered and dropped.
func TestPrometheusScrapesInjectedPodsThroughTheAnnotations(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-prom-annotations", nil)
	deployOperator(t, ns)
	createPod(t, ns, jvmPod("jvm", map[string]string{"app": "annotated"}, testimages.JVMAppRef))
	createPod(t, ns, jvmPod("plain-jvm", map[string]string{"app": "not-selected"}, testimages.JVMAppRef))
	// Selected, but no JVM runs in it: never injected, never annotated.
	createPod(t, ns, echoPod("echo", map[string]string{"app": "annotated"}))
	for _, name := range []string{"jvm", "plain-jvm", "echo"} {
		waitRunning(t, ns, name)
	}
	createExporter(t, ns, exporter("annotated", map[string]string{"app": "annotated"}))
	ep := checkInjected(t, ns, "annotated", "jvm", jmxv1alpha1.DefaultPort)

	srv := startPrometheus(t, promConfig(t, chartJobs(t)))
	up := fmt.Sprintf(`up{job="kubernetes-pods", namespace=%q}`, ns)
	waitFor(t, 2*time.Minute, "the injected JVM's target up", func() (bool, string) {
		got := query(t, srv, up+" == 1")
		return len(got) == 1 && got[0].Metric["pod"] == "jvm", describeSamples(got)
	})
	heap := query(t, srv, fmt.Sprintf(`%s{namespace=%q, pod="jvm", area="heap"}`, heapMetric, ns))
	if len(heap) != 1 || heap[0].Value <= 0 || heap[0].Metric["app"] != "annotated" || heap[0].Metric["instance"] != fmt.Sprintf("%s:%d", ep.PodIP, ep.Port) {
		t.Errorf("%s of the injected JVM: %s, want one positive sample from %s:%d labelled app=annotated", heapMetric, describeSamples(heap), ep.PodIP, ep.Port)
	}
	if got := query(t, srv, fmt.Sprintf(`jmx_exporter_build_info{namespace=%q, pod="jvm"}`, ns)); len(got) != 1 {
		t.Errorf("jmx_exporter_build_info: %s, want jmx_exporter's own series", describeSamples(got))
	}

	// The pods that were not injected: discovered, dropped by the job's
	// keep rule on prometheus.io/scrape, never scraped.
	waitFor(t, time.Minute, "the pods that were not injected among the dropped targets", func() (bool, string) {
		d := droppedPods(t, srv, ns, "kubernetes-pods")
		return d["plain-jvm"] && d["echo"], fmt.Sprintf("%v", d)
	})
	targets := targetsIn(t, srv, ns)
	if len(targets) != 1 || targets[0].Labels["pod"] != "jvm" || targets[0].Health != "up" ||
		targets[0].ScrapeURL != fmt.Sprintf("http://%s:%d/metrics", ep.PodIP, ep.Port) {
		t.Errorf("targets in %s: %+v, want only the injected JVM at http://%s:%d/metrics", ns, targets, ep.PodIP, ep.Port)
	}
	if got := query(t, srv, up); len(got) != 1 {
		t.Errorf("%s: %s, want the injected pod alone", up, describeSamples(got))
	}
}
