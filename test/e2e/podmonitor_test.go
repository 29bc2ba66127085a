package e2e

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
	"github.com/handlerkit/handlerkit/pkg/operator"
	"github.com/handlerkit/handlerkit/pkg/testenv"
	"github.com/handlerkit/handlerkit/pkg/testenv/prometheus"
)

var (
	podMonitorGVR     = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "podmonitors"}
	serviceMonitorGVR = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}
)

func dynamicClient(t *testing.T) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// monitorYAML renders monitors, as read from the cluster, as YAML documents
// for scrapeconfig.
func monitorYAML(t *testing.T, objs ...*unstructured.Unstructured) []byte {
	t.Helper()
	var out []byte
	for _, o := range objs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		out = append(append(out, "---\n"...), b...)
	}
	return out
}

// generatedConfig is the prometheus.yml Prometheus Operator generates for
// the monitors (test/monitoring's scrapeconfig), for this Prometheus.
func generatedConfig(t *testing.T, objs ...*unstructured.Unstructured) []byte {
	t.Helper()
	cfg := runTool(t, "scrapeconfig", monitorYAML(t, objs...), "-version", testenv.PrometheusVersion, "-scrape-interval", scrapeInterval)
	t.Logf("Prometheus Operator's configuration:\n%s", cfg)
	return cfg
}

// twoJVMs runs two JVMs in the first container of p.
func twoJVMs(p *corev1.Pod) {
	java := testimages.JavaHome + "/bin/java -cp " + testimages.AppDir + "/" + jvmtest.SampleJarName + " " + jvmtest.SampleMainClass
	p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", java + " & exec " + java}
}

// declaring declares ports (that nothing listens on) in p's first container.
func declaring(ports ...corev1.ContainerPort) jvmPodOption {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, ports...) }
}

// TestPodMonitorScrapesEveryJVMOnce: the operator keeps a PodMonitor for the
// exporter, owned by it; the scrape configuration that Prometheus Operator's
// own selection and generation code makes of it, loaded into a real
// Prometheus, scrapes every injected JVM exactly once (up == 1), including a
// pod whose JVM container declares two other ports and a pod with two JVMs in
// one container beside a sidecar that declares a port, and nothing of a pod
// the exporter does not select.
func TestPodMonitorScrapesEveryJVMOnce(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-podmonitor", nil)
	deployOperator(t, ns)
	ctx := t.Context()
	labels := map[string]string{"app": "monitored"}
	createPod(t, ns, jvmPod("ports", labels, testimages.JVMAppRef, declaring(
		corev1.ContainerPort{Name: "http", ContainerPort: 8080}, corev1.ContainerPort{Name: "admin", ContainerPort: 8081})))
	two := jvmPod("two-jvms", labels, testimages.JVMAppRef, twoJVMs)
	two.Spec.Containers = append(two.Spec.Containers, corev1.Container{Name: "sidecar", Image: testimages.EchoRef,
		ImagePullPolicy: corev1.PullNever, Ports: []corev1.ContainerPort{{Name: "echo", ContainerPort: 8080}}})
	createPod(t, ns, two)
	createPod(t, ns, jvmPod("not-selected", map[string]string{"app": "other"}, testimages.JVMAppRef))
	for _, name := range []string{"ports", "two-jvms", "not-selected"} {
		waitRunning(t, ns, name)
	}
	createExporter(t, ns, exporter("monitored", labels))
	var eps []jmxv1alpha1.MetricsEndpoint
	waitFor(t, 3*time.Minute, "three JVMs injected", func() (bool, string) {
		ex := getExporter(t, ns, "monitored")
		eps = ex.Status.MetricsEndpoints
		return len(eps) == 3, fmt.Sprintf("endpoints %+v", eps)
	})
	ex := getExporter(t, ns, "monitored")

	// The PodMonitor: named like the exporter, controlled by it, selecting
	// its pods, one endpoint per JVM of the pod with the most.
	pms := dynamicClient(t).Resource(podMonitorGVR).Namespace(ns)
	var pm *unstructured.Unstructured
	waitFor(t, time.Minute, "a PodMonitor with two endpoints", func() (bool, string) {
		got, err := pms.Get(ctx, "monitored", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pm = got
		endpoints, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
		return len(endpoints) == 2, fmt.Sprintf("%d endpoints", len(endpoints))
	})
	owner := metav1.GetControllerOf(pm)
	if owner == nil || owner.UID != ex.UID || owner.Kind != "PrometheusJmxExporter" {
		t.Errorf("PodMonitor owner %+v, want the exporter %s", owner, ex.UID)
	}
	if l := pm.GetLabels(); l[operator.LabelExporter] != "monitored" || l[operator.LabelManagedBy] == "" {
		t.Errorf("PodMonitor labels %v", l)
	}
	selector, _, _ := unstructured.NestedMap(pm.Object, "spec", "selector")
	var sel metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(selector, &sel); err != nil || !reflect.DeepEqual(sel.MatchLabels, labels) {
		t.Errorf("PodMonitor selector %v (%v), want the exporter's %v", selector, err, labels)
	}

	srv := startPrometheus(t, generatedConfig(t, pm))
	want := map[string]string{} // instance -> pod/container
	for _, ep := range eps {
		want[fmt.Sprintf("%s:%d", ep.PodIP, ep.Port)] = ep.Pod + "/" + ep.Container
	}
	job := ns + "/monitored"
	waitFor(t, 2*time.Minute, "every JVM up once", func() (bool, string) {
		got := query(t, srv, fmt.Sprintf(`up{job=%q} == 1`, job))
		seen := map[string]string{}
		for _, s := range got {
			seen[s.Metric["instance"]] = s.Metric["pod"] + "/" + s.Metric["container"]
		}
		if len(got) == len(want) && reflect.DeepEqual(seen, want) {
			return true, ""
		}
		// Say why a JVM is missing: no target (discovery or relabeling), or
		// a target whose scrapes fail.
		var targets []string
		for _, tg := range targetsIn(t, srv, ns) {
			targets = append(targets, fmt.Sprintf("%s %s %s %q", tg.ScrapePool, tg.ScrapeURL, tg.Health, tg.LastError))
		}
		sort.Strings(targets)
		return false, fmt.Sprintf("up: %s, want %v; targets: %v", describeSamples(got), want, targets)
	})
	targets := targetsIn(t, srv, ns)
	if len(targets) != 3 {
		t.Errorf("%d targets in %s, want one per JVM: %+v", len(targets), ns, targets)
	}
	heap := query(t, srv, fmt.Sprintf(`count by (pod, instance) (%s{job=%q, area="heap"})`, heapMetric, job))
	if len(heap) != 3 {
		t.Errorf("heap series of %d JVMs, want 3: %s", len(heap), describeSamples(heap))
	}

	// One target per JVM by the relabeling itself: of the targets that
	// discovery finds for a pod in endpoint 0's job (one per declared port,
	// one per container without ports), all but the anchor are dropped.
	pool := "podMonitor/" + ns + "/monitored/0"
	waitFor(t, time.Minute, "the pods' other discovered targets dropped", func() (bool, string) {
		dropped := droppedByPod(t, srv, ns, pool, "ports", "two-jvms", "not-selected")
		// ports: 8080 and 8081 → 8081 dropped; two-jvms: app (no ports),
		// sidecar:8080 → the sidecar's dropped; not-selected: its one target.
		wantDropped := map[string]int{"ports": 1, "two-jvms": 1, "not-selected": 1}
		return reflect.DeepEqual(dropped, wantDropped), fmt.Sprintf("dropped %v, want %v", dropped, wantDropped)
	})
	if got := query(t, srv, fmt.Sprintf(`up{namespace=%q, pod="not-selected"}`, ns)); len(got) != 0 {
		t.Errorf("the pod the exporter does not select is scraped: %s", describeSamples(got))
	}

	// Deleted by hand, the PodMonitor comes back.
	if err := pms.Delete(ctx, "monitored", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the PodMonitor put back", func() (bool, string) {
		got, err := pms.Get(ctx, "monitored", metav1.GetOptions{})
		return err == nil && got.GetUID() != pm.GetUID(), fmt.Sprint(err)
	})
	// It goes with the exporter (garbage collection through the owner
	// reference), after the finalizer cleared the pods' annotations.
	if err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Delete(ctx, "monitored", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the PodMonitor deleted with the exporter", func() (bool, string) {
		_, err := pms.Get(ctx, "monitored", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	_, pod := injectedRecord(t, ns, "two-jvms")
	for k := range pod.Annotations {
		if _, ok := jvmAnnotation(k); ok || k == operator.AnnotationExporter || k == operator.AnnotationDiscoveryAnchor {
			t.Errorf("annotation %s left on the pod after the exporter's deletion", k)
		}
	}
}

// jvmAnnotation reports whether k is one of the operator's per-JVM
// annotations.
func jvmAnnotation(k string) (string, bool) {
	return strings.CutPrefix(k, operator.AnnotationJVMPrefix)
}

// droppedByPod counts the dropped targets of pool per pod of ns, among
// pods.
func droppedByPod(t *testing.T, srv *prometheus.Server, ns, pool string, pods ...string) map[string]int {
	t.Helper()
	dropped, err := srv.DroppedTargets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, d := range dropped {
		pod := d.DiscoveredLabels["__meta_kubernetes_pod_name"]
		if d.ScrapePool == pool && d.DiscoveredLabels["__meta_kubernetes_namespace"] == ns && slices.Contains(pods, pod) {
			out[pod]++
		}
	}
	return out
}
