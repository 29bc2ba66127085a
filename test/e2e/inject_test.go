package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// heapMetric is a series the agent serves for every
// JVM (its JVM collectors, named the client_java 1.x way).
const heapMetric = "jvm_memory_used_bytes"

// injectedRecord reads the operator's record from a pod.
func injectedRecord(t *testing.T, ns, pod string) (operator.PodRecord, *corev1.Pod) {
	t.Helper()
	p, err := kube.CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var rec operator.PodRecord
	if raw := p.Annotations[operator.AnnotationAgents]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &rec); err != nil {
			t.Fatalf("annotation %s: %v", operator.AnnotationAgents, err)
		}
	}
	return rec, p
}

// waitScrape waits until ip:port serves metric and returns the body.
func waitScrape(t *testing.T, ip string, port int32, metric string) string {
	t.Helper()
	var body string
	waitFor(t, 3*time.Minute, fmt.Sprintf("%s on %s:%d", metric, ip, port), func() (bool, string) {
		b, err := scrape(ip, port)
		if err != nil {
			return false, err.Error()
		}
		body = b
		_, ok := metricValue(b, metric)
		return ok, "no " + metric
	})
	return body
}

// checkInjected checks everything a successful injection of pod leaves: the
// exporter's endpoint, the pod's annotations and record, the Events, and a
// scrape of the real agent through the pod IP.
func checkInjected(t *testing.T, ns, exporterName, podName string, port int32) jmxv1alpha1.MetricsEndpoint {
	t.Helper()
	var ep jmxv1alpha1.MetricsEndpoint
	waitFor(t, 3*time.Minute, "an endpoint for "+podName, func() (bool, string) {
		ex := getExporter(t, ns, exporterName)
		for _, e := range ex.Status.MetricsEndpoints {
			if e.Pod == podName {
				ep = e
				return true, ""
			}
		}
		return false, fmt.Sprintf("status %+v", ex.Status)
	})
	rec, pod := injectedRecord(t, ns, podName)
	if ep.Port != port || ep.PodIP != pod.Status.PodIP || ep.Container == "" || ep.InjectedAt.IsZero() || ep.PID == 0 {
		t.Errorf("endpoint %+v, want port %d on %s with container, pid and injectedAt", ep, port, pod.Status.PodIP)
	}
	var cid string
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == ep.Container {
			cid = cs.ContainerID
		}
	}
	if ep.ContainerID != cid || rec.Containers[ep.Container].ContainerID != cid {
		t.Errorf("endpoint container ID %q, record %q, want the running container %q", ep.ContainerID, rec.Containers[ep.Container].ContainerID, cid)
	}
	if rec.Exporter != exporterName {
		t.Errorf("record names exporter %q, want %q", rec.Exporter, exporterName)
	}
	want := map[string]string{operator.AnnotationScrape: "true", operator.AnnotationPath: "/metrics",
		operator.AnnotationPort: fmt.Sprint(port)}
	for k, v := range want {
		if pod.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, pod.Annotations[k], v)
		}
	}
	body := waitScrape(t, ep.PodIP, ep.Port, heapMetric)
	if !strings.Contains(body, "jmx_scrape_error") && !strings.Contains(body, "jmx_exporter_build_info") {
		t.Errorf("the scrape does not look like jmx_exporter's:\n%.600s", body)
	}
	waitFor(t, 30*time.Second, "Injected events on pod and exporter", func() (bool, string) {
		return hasEvent(events(t, ns, "Pod", podName), "Injected") &&
			hasEvent(events(t, ns, "PrometheusJmxExporter", exporterName), "Injected"), "missing"
	})
	return ep
}

func TestEphemeralContainerInjectsRunningJVMs(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-ephemeral", nil)
	deployOperator(t, ns)
	labels := map[string]string{"app": "orders"}
	createPod(t, ns, jvmPod("jvm", labels, testimages.JVMAppRef))
	// The shell-less image has no shell, no tar and no JDK: only the
	// ephemeral container can reach its JVM.
	createPod(t, ns, jvmPod("slim", labels, testimages.ShelllessJVMRef))
	before := map[string]string{}
	for _, name := range []string{"jvm", "slim"} {
		p := waitRunning(t, ns, name)
		before[name] = p.Status.ContainerStatuses[0].ContainerID
	}
	createExporter(t, ns, exporter("orders", labels))
	for _, name := range []string{"jvm", "slim"} {
		checkInjected(t, ns, "orders", name, jmxv1alpha1.DefaultPort)
	}
	ex := waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected, time.Minute)
	if ex.Status.MatchedPods != 2 || ex.Status.InjectedPods != 2 || ex.Status.FailedPods != 0 || ex.Status.ObservedGeneration != ex.Generation {
		t.Errorf("status counts %+v", ex.Status)
	}
	for _, name := range []string{"jvm", "slim"} {
		_, pod := injectedRecord(t, ns, name)
		// No restart: the same container instance serves the metrics.
		if id := pod.Status.ContainerStatuses[0].ContainerID; id != before[name] || pod.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("%s restarted: %s -> %s", name, before[name], id)
		}
		if len(pod.Spec.EphemeralContainers) != 1 {
			t.Fatalf("%s has %d ephemeral containers, want 1", name, len(pod.Spec.EphemeralContainers))
		}
		ec := pod.Spec.EphemeralContainers[0]
		sc := ec.SecurityContext
		// These root JVMs hold the runtime's default capabilities, so the
		// ephemeral container adds none (never SYS_PTRACE) and holds the same
		// set: within baseline because the target is.
		if ec.TargetContainerName != "app" || sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities != nil && len(sc.Capabilities.Add) != 0 {
			t.Errorf("ephemeral container %+v", ec)
		}
	}
}

func TestExecInjectsRunningJVM(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-exec", nil)
	deployOperator(t, ns, withExec())
	labels := map[string]string{"app": "billing"}
	createPod(t, ns, jvmPod("jvm", labels, testimages.JVMAppRef, asUser(1000, 1000)))
	waitRunning(t, ns, "jvm")
	createExporter(t, ns, exporter("billing", labels, func(ex *jmxv1alpha1.PrometheusJmxExporter) {
		ex.Spec.Injection.Strategy = jmxv1alpha1.InjectionExec
		ex.Spec.Port = 9500
	}))
	checkInjected(t, ns, "billing", "jvm", 9500)
	_, pod := injectedRecord(t, ns, "jvm")
	if len(pod.Spec.EphemeralContainers) != 0 {
		t.Errorf("Exec added ephemeral containers: %+v", pod.Spec.EphemeralContainers)
	}

	// Exec into an image without a shell: a named, permanent failure that
	// says what to do, and the JVM is untouched.
	createPod(t, ns, jvmPod("slim", map[string]string{"app": "slim"}, testimages.ShelllessJVMRef))
	waitRunning(t, ns, "slim")
	createExporter(t, ns, exporter("slim", map[string]string{"app": "slim"}, func(ex *jmxv1alpha1.PrometheusJmxExporter) {
		ex.Spec.Injection.Strategy = jmxv1alpha1.InjectionExec
	}))
	ex := waitCondition(t, ns, "slim", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonInjectionFailed, 2*time.Minute)
	if c := findCond(ex.Status.Conditions, jmxv1alpha1.ConditionDegraded); !strings.Contains(c.Message, inject.ReasonShellNotFound) || !strings.Contains(c.Message, "EphemeralContainer") {
		t.Errorf("message %q does not name %s and the way out", c.Message, inject.ReasonShellNotFound)
	}
	if p := waitRunning(t, ns, "slim"); p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Error("the shell-less JVM restarted")
	}
}
