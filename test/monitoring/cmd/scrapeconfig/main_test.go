package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/config"
	// Registers kubernetes_sd_configs, as the server's build does.
	_ "github.com/prometheus/prometheus/discovery/kubernetes"
)

const podMonitor = `apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata:
  name: orders
  namespace: shop
spec:
  selector:
    matchLabels: {app: orders}
  podMetricsEndpoints:
  - path: /metrics
    relabelings:
    - {action: keepequal, sourceLabels: [__meta_kubernetes_pod_container_name], targetLabel: __tmp_x}
`

// TestGeneratesWhatPrometheusLoads: the generated configuration, with the
// reloader's variables filled in, is one Prometheus accepts, and holds the
// PodMonitor's job and relabeling.
func TestGeneratesWhatPrometheusLoads(t *testing.T) {
	out, err := generate(t.Context(), strings.NewReader(podMonitor), "v3.16.0", "2s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "$(SHARD)") {
		t.Fatalf("no $(SHARD) to fill in:\n%s", out)
	}
	out = expandEnv(out, map[string]string{"SHARD": "0", "POD_NAME": "p-0"})
	cfg, err := config.Load(string(out), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Prometheus refuses the configuration: %v\n%s", err, out)
	}
	if len(cfg.ScrapeConfigs) != 1 || cfg.ScrapeConfigs[0].JobName != "podMonitor/shop/orders/0" {
		t.Fatalf("scrape configs %+v", cfg.ScrapeConfigs)
	}
	var keepequal bool
	for _, r := range cfg.ScrapeConfigs[0].RelabelConfigs {
		keepequal = keepequal || r.Action == "keepequal" && r.TargetLabel == "__tmp_x"
	}
	if !keepequal || strings.Contains(string(out), "$(") {
		t.Errorf("the PodMonitor's relabeling or a variable is missing:\n%s", out)
	}
}

func TestRejectedMonitorsAreNamed(t *testing.T) {
	bad := strings.Replace(podMonitor, "targetLabel: __tmp_x", "targetLabel: ''", 1)
	_, err := generate(t.Context(), strings.NewReader(bad), "v3.16.0", "2s", nil)
	if err == nil || !strings.Contains(err.Error(), "PodMonitor shop/orders") {
		t.Fatalf("want the operator's rejection naming shop/orders, got %v", err)
	}
	mixed := podMonitor + "---\n" + strings.Replace(podMonitor, "namespace: shop", "namespace: other", 1)
	if _, err := generate(t.Context(), strings.NewReader(mixed), "v3.16.0", "2s", nil); err == nil || !strings.Contains(err.Error(), "one namespace") {
		t.Fatalf("monitors of two namespaces: %v", err)
	}
}

const serviceMonitor = `apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: prometheus-jmx-exporter-operator-metrics
  namespace: shop
  labels: {app.kubernetes.io/name: prometheus-jmx-exporter-operator, app.kubernetes.io/component: metrics}
spec:
  selector:
    matchLabels: {app.kubernetes.io/name: prometheus-jmx-exporter-operator, app.kubernetes.io/component: metrics}
  namespaceSelector: {matchNames: [shop]}
  endpoints:
  - {port: http-metrics, path: /metrics}
`

// TestKubePrometheusStackSelectsLabelledMonitors: a Prometheus with
// kube-prometheus-stack's default selectors (matchLabels release: <release>)
// scrapes the PodMonitor and ServiceMonitor that carry the label, as the
// operator's --pod-monitor-labels and the install's monitor labels set it,
// and nothing of the same monitors without it.
func TestKubePrometheusStackSelectsLabelledMonitors(t *testing.T) {
	kps := map[string]string{"release": "kps"}
	labelled := strings.Replace(podMonitor, "  namespace: shop\n", "  namespace: shop\n  labels: {release: kps, jmx.handlerkit.dev/exporter: orders}\n", 1) + "---\n" +
		strings.Replace(serviceMonitor, "app.kubernetes.io/component: metrics}\nspec", "app.kubernetes.io/component: metrics, release: kps}\nspec", 1)
	out, err := generate(t.Context(), strings.NewReader(labelled), "v3.16.0", "2s", kps)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(string(expandEnv(out, map[string]string{"SHARD": "0", "POD_NAME": "p-0"})), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Prometheus refuses the configuration: %v\n%s", err, out)
	}
	var jobs []string
	for _, sc := range cfg.ScrapeConfigs {
		jobs = append(jobs, sc.JobName)
	}
	want := []string{"serviceMonitor/shop/prometheus-jmx-exporter-operator-metrics/0", "podMonitor/shop/orders/0"}
	if !reflect.DeepEqual(jobs, want) {
		t.Errorf("jobs %v, want %v\n%s", jobs, want, labelled)
	}

	out, err = generate(t.Context(), strings.NewReader(podMonitor+"---\n"+serviceMonitor), "v3.16.0", "2s", kps)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "podMonitor/") || strings.Contains(string(out), "serviceMonitor/") {
		t.Errorf("monitors without release: kps selected:\n%s", out)
	}
}

// TestKubePrometheusStackSelectsTheOperatorsServiceMonitor: the ServiceMonitor
// that handlerkit's pkg/metrics EnsureService writes with
// ServiceOptions.ServiceMonitorLabels release=kps (what the operator's
// --service-monitor-labels and the chart's serviceMonitor.labels set) is
// selected by a Prometheus with kube-prometheus-stack's default
// serviceMonitorSelector, matchLabels release: kps, and becomes a scrape job
// Prometheus loads; the one written without the label is not selected. The
// inputs are what a real apiserver returned (testdata, written and checked by
// pkg/metrics' TestEnsureService), not hand-written, so this module need not
// depend on handlerkit's.
func TestKubePrometheusStackSelectsTheOperatorsServiceMonitor(t *testing.T) {
	kps := map[string]string{"release": "kps"}
	for file, want := range map[string][]string{
		"operator-servicemonitor-release-kps.yaml": {"serviceMonitor/monitoring/prometheus-jmx-exporter-operator-metrics/0"},
		"operator-servicemonitor.yaml":             nil,
	} {
		t.Run(file, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			out, err := generate(t.Context(), bytes.NewReader(in), "v3.16.0", "2s", kps)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(string(expandEnv(out, map[string]string{"SHARD": "0", "POD_NAME": "p-0"})), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("Prometheus refuses the configuration: %v\n%s", err, out)
			}
			var jobs []string
			for _, sc := range cfg.ScrapeConfigs {
				jobs = append(jobs, sc.JobName)
			}
			if !reflect.DeepEqual(jobs, want) {
				t.Fatalf("jobs %v, want %v\n%s", jobs, want, out)
			}
			if want == nil {
				// Valid all the same: a Prometheus that selects every monitor scrapes it.
				all, err := generate(t.Context(), bytes.NewReader(in), "v3.16.0", "2s", nil)
				if err != nil || !strings.Contains(string(all), "job_name: serviceMonitor/monitoring/prometheus-jmx-exporter-operator-metrics/0") {
					t.Errorf("not selected by a Prometheus that selects every ServiceMonitor (err %v):\n%s", err, all)
				}
				return
			}
			// The job scrapes the operator's metrics Service: its endpoints, port http-metrics, in its namespace.
			sc := cfg.ScrapeConfigs[0]
			if sc.MetricsPath != "/metrics" {
				t.Errorf("metrics path %q", sc.MetricsPath)
			}
			keeps := map[string]bool{}
			for _, r := range sc.RelabelConfigs {
				if r.Action == "keep" && len(r.SourceLabels) > 0 {
					keeps[string(r.SourceLabels[0])+"="+r.Regex.String()] = true
				}
			}
			for _, k := range []string{
				"__meta_kubernetes_service_label_app_kubernetes_io_name=(prometheus-jmx-exporter-operator);true",
				"__meta_kubernetes_service_label_app_kubernetes_io_component=(metrics);true",
				"__meta_kubernetes_endpoint_port_name=http-metrics",
			} {
				if !keeps[k] {
					t.Errorf("no keep rule %s; the job's keep rules: %v", k, keeps)
				}
			}
		})
	}
}
