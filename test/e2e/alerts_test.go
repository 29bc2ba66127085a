package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
	"github.com/handlerkit/handlerkit/pkg/operator"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// rulesFile holds the alerts that the chart and deploy/prometheus ship.
const rulesFile = "charts/prometheus-jmx-exporter-operator/files/prometheus-rules.yaml"

// rulesWithFor returns the rules file with the `for` of the named alerts
// replaced: the one change the tests make to it, so that an alert whose
// `for` is minutes fires within the test.
func rulesWithFor(t *testing.T, fors map[string]string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Name  string           `json:"name"`
			Rules []map[string]any `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	changed := 0
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if d, ok := fors[fmt.Sprint(r["alert"])]; ok {
				r["for"] = d
				changed++
			}
		}
	}
	if changed != len(fors) {
		t.Fatalf("%s: found %d of the alerts %v", rulesFile, changed, fors)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// stoppableJVM runs the sample application as a child of a shell that
// writes its pid to /tmp/jvm.pid, so that a test can stop it (SIGSTOP):
// PID 1 of a container ignores signals from inside it.
func stoppableJVM(p *corev1.Pod) {
	java := testimages.JavaHome + "/bin/java -cp " + testimages.AppDir + "/" + jvmtest.SampleJarName + " " + jvmtest.SampleMainClass
	p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", java + " & echo $! > /tmp/jvm.pid; wait"}
}

// TestAgentDownAlertFires: with the operator's PodMonitors labelled
// release=kps (--pod-monitor-labels), a Prometheus configured by Prometheus
// Operator's own code with kube-prometheus-stack's default selector
// (release: kps) scrapes the injected JVM with the exporter's
// spec.podMonitor settings; loaded with the alert rules file (the `for` of
// HandlerkitJmxAgentDown shortened to 10s, the file otherwise unchanged), it
// fires HandlerkitJmxAgentDown for that JVM once the JVM is stopped and the
// agent answers no more. The PrometheusRule of deploy/prometheus is accepted
// by Prometheus Operator's CRD.
func TestAgentDownAlertFires(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-alerts", nil)
	deployOperator(t, ns, withArgs("--pod-monitor-labels=release=kps"))
	ctx := t.Context()

	// The kustomize users' PrometheusRule: Prometheus Operator's schema
	// accepts it.
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "prometheus", "prometheus-rule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rule := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &rule.Object); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheusrules"}
	if _, err := dynamicClient(t).Resource(gvr).Namespace(ns).Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the PrometheusRule of deploy/prometheus: %v", err)
	}

	labels := map[string]string{"app": "alerting"}
	createPod(t, ns, jvmPod("stoppable", labels, testimages.JVMAppRef, stoppableJVM))
	waitRunning(t, ns, "stoppable")
	createExporter(t, ns, exporter("alerting", labels, func(ex *jmxv1alpha1.PrometheusJmxExporter) {
		ex.Spec.PodMonitor = &jmxv1alpha1.PodMonitorSettings{Interval: "2s", ScrapeTimeout: "1s", SampleLimit: ptr.To[int64](100000),
			MetricRelabelings: []jmxv1alpha1.RelabelConfig{{Action: "drop", SourceLabels: []string{"__name__"}, Regex: "jvm_buffer_pool_.*"}}}
	}))
	waitFor(t, 3*time.Minute, "the JVM injected", func() (bool, string) {
		ex := getExporter(t, ns, "alerting")
		return len(ex.Status.MetricsEndpoints) == 1, fmt.Sprintf("endpoints %+v, conditions %+v", ex.Status.MetricsEndpoints, ex.Status.Conditions)
	})
	if c := meta.FindStatusCondition(getExporter(t, ns, "alerting").Status.Conditions, jmxv1alpha1.ConditionPodMonitorValid); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("PodMonitorValid: %+v", c)
	}
	pms := dynamicClient(t).Resource(podMonitorGVR).Namespace(ns)
	var pm *unstructured.Unstructured
	waitFor(t, time.Minute, "the PodMonitor labelled release=kps", func() (bool, string) {
		got, err := pms.Get(ctx, "alerting", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pm = got
		return got.GetLabels()["release"] == "kps" && got.GetLabels()[operator.LabelExporter] == "alerting", fmt.Sprint(got.GetLabels())
	})

	cfg := runTool(t, "scrapeconfig", monitorYAML(t, pm), "-version", testenv.PrometheusVersion, "-scrape-interval", "30s", "-selector", "release=kps")
	t.Logf("Prometheus Operator's configuration:\n%s", cfg)
	for _, want := range []string{"job_name: podMonitor/" + ns + "/alerting/0", "scrape_interval: 2s", "scrape_timeout: 1s", "sample_limit: 100000", "jvm_buffer_pool_.*"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("the generated configuration lacks %q", want)
		}
	}
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, rulesWithFor(t, map[string]string{"HandlerkitJmxAgentDown": "10s"}), 0o644); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(cfg, &doc); err != nil {
		t.Fatal(err)
	}
	doc["rule_files"] = []any{rules}
	global, _ := doc["global"].(map[string]any)
	if global == nil {
		global = map[string]any{}
		doc["global"] = global
	}
	global["evaluation_interval"] = scrapeInterval
	withRules, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	srv := startPrometheus(t, withRules)

	up := fmt.Sprintf(`up{namespace=%q, pod="stoppable", %s="alerting"}`, ns, operator.TargetLabelExporter)
	// While the agent answers, the alert is neither pending nor firing. On
	// a busy node the agent's first scrapes can time out (1 s) before it
	// answers, and the alert's state then lags up by an evaluation: so this
	// waits for the agent up and the alert gone together, and fails, with
	// the alerts it saw, if that never happens.
	alerts := fmt.Sprintf(`ALERTS{alertname="HandlerkitJmxAgentDown", namespace=%q}`, ns)
	waitFor(t, 2*time.Minute, "the agent up and no HandlerkitJmxAgentDown", func() (bool, string) {
		got, pending := query(t, srv, up+" == 1"), query(t, srv, alerts)
		return len(got) == 1 && len(pending) == 0, fmt.Sprintf("%s; alerts %s", describeSamples(query(t, srv, up)), describeSamples(pending))
	})
	firing := fmt.Sprintf(`ALERTS{alertname="HandlerkitJmxAgentDown", alertstate="firing", namespace=%q}`, ns)
	if got := query(t, srv, fmt.Sprintf(`count({namespace=%q, pod="stoppable", __name__=~"jvm_buffer_pool_.*"})`, ns)); len(got) != 0 {
		t.Errorf("the metric relabeling let jvm_buffer_pool_* through: %s", describeSamples(got))
	}

	if stdout, stderr, err := execIn(t, ns, "stoppable", "app", []string{"/bin/sh", "-c", "kill -STOP $(cat /tmp/jvm.pid)"}); err != nil {
		t.Fatalf("stop the JVM: %v\n%s%s", err, stdout, stderr)
	}
	waitFor(t, 3*time.Minute, "HandlerkitJmxAgentDown firing", func() (bool, string) {
		got := query(t, srv, firing)
		ok := len(got) == 1 && got[0].Metric["pod"] == "stoppable" && got[0].Metric[operator.TargetLabelExporter] == "alerting" &&
			got[0].Metric["severity"] == "warning"
		return ok, fmt.Sprintf("alerts %s, %s", describeSamples(query(t, srv, "ALERTS")), describeSamples(query(t, srv, up)))
	})
}
