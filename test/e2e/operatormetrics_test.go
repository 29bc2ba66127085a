package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/leader"
	"github.com/handlerkit/handlerkit/pkg/testenv/prometheus"
)

// metricsService is the Service (and ServiceMonitor) pkg/metrics writes for
// the operator's Deployment.
const metricsService = operatorName + "-metrics"

// waitReplicasReady waits until the operator's Deployment has rolled out n
// ready replicas of its current template and no others.
func waitReplicasReady(t *testing.T, ns string, n int32) {
	t.Helper()
	waitFor(t, 3*time.Minute, fmt.Sprintf("%d ready replicas of the current template", n), func() (bool, string) {
		d, err := kube.AppsV1().Deployments(ns).Get(t.Context(), operatorName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := d.Status
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == n && s.ReadyReplicas == n && s.Replicas == n,
			fmt.Sprintf("%+v", s)
	})
}

// getMonitor waits for the named monitor and returns it.
func getMonitor(t *testing.T, ns, name string, pod bool) *unstructured.Unstructured {
	t.Helper()
	gvr := serviceMonitorGVR
	if pod {
		gvr = podMonitorGVR
	}
	var obj *unstructured.Unstructured
	waitFor(t, time.Minute, gvr.Resource+" "+name, func() (bool, string) {
		got, err := dynamicClient(t).Resource(gvr).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
		obj = got
		return err == nil, fmt.Sprint(err)
	})
	return obj
}

// runningOperatorPods names the operator's pods that are not terminating,
// sorted.
func runningOperatorPods(t *testing.T, ns string) []string {
	t.Helper()
	pods, err := kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + operatorName})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	sort.Strings(names)
	return names
}

// operatorTargets waits until Prometheus scrapes, through the metrics
// Service, exactly the operator pods of ns named by want (all up), and
// leader_election_master_status says that exactly one of them leads; it
// returns that status per pod. Pods of a finished rollout linger as targets
// until their endpoints go, so the wait is for the current pods.
func operatorTargets(t *testing.T, srv *prometheus.Server, ns string, want func() []string) map[string]float64 {
	t.Helper()
	status := map[string]float64{}
	waitFor(t, 2*time.Minute, "the operator's current replicas scraped through "+metricsService, func() (bool, string) {
		pods := want()
		up := query(t, srv, fmt.Sprintf(`up{job=%q, namespace=%q} == 1`, metricsService, ns))
		got := query(t, srv, fmt.Sprintf(`leader_election_master_status{job=%q, namespace=%q}`, metricsService, ns))
		var upPods []string
		for _, s := range up {
			upPods = append(upPods, s.Metric["pod"])
		}
		sort.Strings(upPods)
		clear(status)
		leaders := 0.0
		for _, s := range got {
			status[s.Metric["pod"]] = s.Value
			leaders += s.Value
		}
		return slices.Equal(upPods, pods) && len(status) == len(pods) && leaders == 1,
			fmt.Sprintf("want %v; up %s, leader_election_master_status %s", pods, describeSamples(up), describeSamples(got))
	})
	return status
}

// leaderPod names the operator pod that carries the leader label.
func leaderPod(t *testing.T, ns string) string {
	t.Helper()
	pods, err := kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=" + operatorName + "," + leader.DefaultLabelKey + "=" + leader.DefaultLabelValue})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d operator pods carry the leader label, want 1", len(pods.Items))
	}
	return pods.Items[0].Name
}

// TestOperatorMetricsThroughTheMetricsService: two operator replicas write
// their metrics Service and its ServiceMonitor; the configuration Prometheus
// Operator generates from that ServiceMonitor (and from the exporter's
// PodMonitor), loaded into a real Prometheus, scrapes only the leader with
// --metrics-service=leader, and both replicas, the stand-by reporting
// leader_election_master_status 0, once the flag says every-replica. On the
// series the run produced, every query of the Grafana dashboard in
// deploy/grafana runs and every metric it names exists.
func TestOperatorMetricsThroughTheMetricsService(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-prom-operator", nil)
	deployOperator(t, ns, withReplicas(2), withArgs("--metrics-service=leader"))
	waitReplicasReady(t, ns, 2)
	labels := map[string]string{"app": "dashboard"}
	createPod(t, ns, jvmPod("jvm", labels, testimages.JVMAppRef))
	waitRunning(t, ns, "jvm")
	createExporter(t, ns, exporter("dashboard", labels))
	checkInjected(t, ns, "dashboard", "jvm", jmxv1alpha1.DefaultPort)

	waitFor(t, time.Minute, "the metrics Service selecting the leader", func() (bool, string) {
		svc, err := kube.CoreV1().Services(ns).Get(t.Context(), metricsService, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return svc.Spec.Selector[leader.DefaultLabelKey] == leader.DefaultLabelValue, fmt.Sprintf("selector %v", svc.Spec.Selector)
	})
	sm := getMonitor(t, ns, metricsService, false)
	pm := getMonitor(t, ns, "dashboard", true)
	srv := startPrometheus(t, generatedConfig(t, sm, pm))

	// Leader only: one target, the pod with the leader label, reporting 1.
	status := operatorTargets(t, srv, ns, func() []string { return []string{leaderPod(t, ns)} })
	if lead := leaderPod(t, ns); status[lead] != 1 {
		t.Errorf("leader_election_master_status %v, want 1 from the leader %s alone", status, lead)
	}
	if got := query(t, srv, fmt.Sprintf(`jmx_operator_managed_jvms{job=%q, namespace=%q, exporter="dashboard"}`, metricsService, ns)); len(got) != 1 || got[0].Value != 1 {
		t.Errorf("the leader's jmx_operator_managed_jvms: %s, want 1", describeSamples(got))
	}

	// Every replica: the flag changes, the Deployment rolls out, and the new
	// replicas write the Service without the leader label.
	d, err := kube.AppsV1().Deployments(ns).Get(t.Context(), operatorName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	args := d.Spec.Template.Spec.Containers[0].Args
	i := slices.Index(args, "--metrics-service=leader")
	args[i] = "--metrics-service=every-replica"
	if _, err := kube.AppsV1().Deployments(ns).Update(t.Context(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplicasReady(t, ns, 2)
	waitFor(t, time.Minute, "the metrics Service selecting every replica", func() (bool, string) {
		svc, err := kube.CoreV1().Services(ns).Get(t.Context(), metricsService, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		_, selectsLeader := svc.Spec.Selector[leader.DefaultLabelKey]
		return !selectsLeader, fmt.Sprintf("selector %v", svc.Spec.Selector)
	})
	status = operatorTargets(t, srv, ns, func() []string { return runningOperatorPods(t, ns) })
	if lead := leaderPod(t, ns); len(status) != 2 || status[lead] != 1 {
		t.Errorf("leader_election_master_status %v, want 1 from the leader %s and 0 from the stand-by", status, lead)
	}

	// The dashboard's JVM panels need the JVM's series: wait until
	// Prometheus has scraped the agent through the PodMonitor (its first
	// answer can take seconds on a loaded node, and nothing above waited
	// for that target).
	waitFor(t, 3*time.Minute, "the JVM scraped through the exporter's PodMonitor", func() (bool, string) {
		up := query(t, srv, fmt.Sprintf(`up{namespace=%q, pod="jvm"} == 1`, ns))
		info := query(t, srv, fmt.Sprintf(`jvm_runtime_info{namespace=%q, pod="jvm"}`, ns))
		return len(up) == 1 && len(info) == 1, fmt.Sprintf("up %s, jvm_runtime_info %s", describeSamples(up), describeSamples(info))
	})
	checkDashboard(t, srv)
}

// checkDashboard runs every query of deploy/grafana's dashboard on srv and
// checks that every metric name Prometheus' parser finds in them
// (test/monitoring's dashboardqueries) is among the series srv holds.
func checkDashboard(t *testing.T, srv *prometheus.Server) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "grafana", "prometheus-jmx-exporter.json"))
	if err != nil {
		t.Fatal(err)
	}
	var queries []struct {
		Panel, Expr, PromQL string
		Metrics             []string
	}
	if err := json.Unmarshal(runTool(t, "dashboardqueries", data), &queries); err != nil {
		t.Fatal(err)
	}
	names, err := srv.MetricNames(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(queries) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	checked := map[string]bool{}
	for _, q := range queries {
		for _, m := range q.Metrics {
			if _, found := slices.BinarySearch(names, m); !found {
				t.Errorf("%s: %s names %s, which the run never produced", q.Panel, q.Expr, m)
			}
			checked[m] = true
		}
		if _, err := srv.Query(t.Context(), q.PromQL); err != nil {
			t.Errorf("%s: %v", q.Panel, err)
		}
	}
	t.Logf("the dashboard's %d queries ran; the %d metrics they name were all scraped", len(queries), len(checked))
}
