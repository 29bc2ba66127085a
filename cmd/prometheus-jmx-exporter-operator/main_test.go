package main

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	if errb.Len() != 0 {
		t.Errorf("--help wrote to stderr: %q", errb.String())
	}
	help := out.String()
	for _, f := range []string{"-namespaces", "WATCH_NAMESPACE", "-kubeconfig", "-metrics-addr", "-leader-election", "-log-level",
		"-log-format", "-strategies", "-default-strategy", "-injection-timeout", "-parallelism", "-jvm-wait", "-late-jvm-interval", "LATE_JVM_INTERVAL", "-kube-api-qps", "KUBE_API_QPS", "-kube-api-burst", "-agent-image",
		"-image-pull-policy", "-local-attach-helper", "-local-agent-jar", "-pod-monitors", "POD_MONITORS", "-pod-monitor-labels",
		"-service-monitor-labels", "SERVICE_MONITOR_LABELS", "-metrics-service", "METRICS_SERVICE", "-breaker-window", "-replacement-wait", "REPLACEMENT_WAIT", "-resync", "-ephemeral-container-budget", "-max-attempts",
		"-allowed-agent-images", "ALLOWED_AGENT_IMAGES", "-agent-path", "-attach-helper-path", "-report-unserved", "REPORT_UNSERVED",
		"-graceful-timeout", "-version", "docs/operator.md", "-webhook", "WEBHOOK", "-webhook-addr", "WEBHOOK_ADDR",
		"-webhook-service", "-webhook-secret", "-webhook-configuration", "-webhook-external-certs", "WEBHOOK_EXTERNAL_CERTS",
		"-at-start-delivery", "AT_START_DELIVERY", "image-volume", "init-container",
		"-at-start-image-config", "AT_START_IMAGE_CONFIG", "-at-start-unreadable-image", "AT_START_UNREADABLE_IMAGE"} {
		if !strings.Contains(help, f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
}

// TestDocsListEveryFlag: docs/operator.md's flag table names every flag
// --help lists, with its environment variable.
func TestDocsListEveryFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operator.md"))
	if err != nil {
		t.Fatal(err)
	}
	flagLine := regexp.MustCompile(`^  -([a-z-]+)`)
	envName := regexp.MustCompile(`\(env ([A-Z_]+)\)`)
	help := strings.Split(out.String(), "\n")
	n := 0
	for i, line := range help {
		m := flagLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n++
		if !strings.Contains(string(doc), "`--"+m[1]+"`") {
			t.Errorf("docs/operator.md does not list --%s", m[1])
		}
		if i+1 < len(help) {
			if e := envName.FindStringSubmatch(help[i+1]); e != nil && !strings.Contains(string(doc), "(`"+e[1]+"`)") {
				t.Errorf("docs/operator.md does not name --%s's environment variable %s", m[1], e[1])
			}
		}
	}
	if n < 20 {
		t.Fatalf("found %d flags in --help, parsing is off", n)
	}
}

func TestBadUsageExitsTwoWithAClearError(t *testing.T) {
	for _, args := range [][]string{
		{"--leader-election", "maybe"},
		{"--log-format", "xml"},
		{"--strategies", "Exec,Teleport"},
		{"--strategies", ""},
		{"--default-strategy", "Copy"},
		{"--image-pull-policy", "Sometimes"},
		{"--injection-timeout", "1s"},
		{"--parallelism", "0"},
		{"--breaker-window", "10ms"},
		{"--replacement-wait", "10ms"},
		{"--late-jvm-interval", "30s"},
		{"--late-jvm-interval", "-1m"},
		{"--kube-api-qps", "0"},
		{"--kube-api-qps", "20", "--kube-api-burst", "0"},
		{"--kube-api-qps", "many"},
		{"--kube-api-burst", "0"},
		{"--ephemeral-container-budget", "0"},
		{"--max-attempts", "0"},
		{"--allowed-agent-images", "a:1,b c:2"},
		{"--log-level", "loud"},
		{"--metrics-service", "some"},
		{"--metrics-service", "leader", "--leader-election", "none"},
		{"--pod-monitor-labels", "release"},
		{"--pod-monitor-labels", "bad key=x"},
		{"--service-monitor-labels", "release"},
		{"--service-monitor-labels", "release=not ok!"},
		{"--service-monitor-labels", "app.kubernetes.io/name=other"},
		{"--webhook", "maybe"},
		{"--webhook", "true"},
		{"--at-start-delivery", "copy"},
		{"--at-start-delivery", "ImageVolume"},
		{"--at-start-image-config", "pull-secrets"},
		{"--at-start-unreadable-image", "Skip"},
		{"--webhook-addr", "9443"},
		{"--webhook-addr", ":0"},
		{"--webhook-service", "Webhook_Service"},
		{"--webhook-secret", ""},
		{"--webhook-configuration", "bad name"},
		{"extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %q)", args, code, errb.String())
		} else if !strings.Contains(errb.String(), "prometheus-jmx-exporter-operator:") && !strings.Contains(errb.String(), "flag") {
			t.Errorf("%q: no clear error: %q", args, errb.String())
		}
	}
}

func TestEnvironmentSetsDefaultsAndFlagsWin(t *testing.T) {
	t.Setenv("WATCH_NAMESPACE", "a,b")
	t.Setenv("PARALLELISM", "3")
	var out bytes.Buffer
	c, err := parseFlags([]string{"--parallelism", "5"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if c.namespaces != "a,b" || c.parallelism != 5 {
		t.Fatalf("namespaces %q parallelism %d", c.namespaces, c.parallelism)
	}
	if c.strategies != "EphemeralContainer" || len(c.allowedImages) != 0 {
		t.Fatalf("defaults: strategies %q (Exec is opt-in), allowed images %q (only --agent-image)", c.strategies, c.allowedImages)
	}
	if c.kubeAPIQPS >= 0 {
		t.Fatalf("defaults: --kube-api-qps %v, want negative (no client-side limit)", c.kubeAPIQPS)
	}
	if !c.podMonitors || c.metricsService != "every-replica" || len(c.podMonLabels) != 0 || len(c.svcMonLabels) != 0 {
		t.Fatalf("defaults: pod monitors %v, metrics service %q, labels %v %v", c.podMonitors, c.metricsService, c.podMonLabels, c.svcMonLabels)
	}
	t.Setenv("ALLOWED_AGENT_IMAGES", "jmx-agent:v2, jmx-agent@sha256:0")
	if c, err = parseFlags(nil, &out); err != nil {
		t.Fatal(err)
	}
	if len(c.allowedImages) != 2 || c.allowedImages[1] != "jmx-agent@sha256:0" {
		t.Fatalf("ALLOWED_AGENT_IMAGES: %q", c.allowedImages)
	}
	t.Setenv("POD_MONITORS", "false")
	t.Setenv("POD_MONITOR_LABELS", "release=kps, team=jvm")
	if c, err = parseFlags([]string{"--metrics-service", "leader"}, &out); err != nil {
		t.Fatal(err)
	}
	if c.podMonitors || c.metricsService != "leader" || c.podMonLabels["release"] != "kps" || c.podMonLabels["team"] != "jvm" {
		t.Fatalf("pod monitors %v, metrics service %q, labels %v", c.podMonitors, c.metricsService, c.podMonLabels)
	}
	if len(c.svcMonLabels) != 0 {
		t.Fatalf("POD_MONITOR_LABELS reached the ServiceMonitor: %v", c.svcMonLabels)
	}
}

// TestServiceMonitorLabels: --service-monitor-labels and SERVICE_MONITOR_LABELS
// (which the chart sets from serviceMonitor.labels) give the operator's
// ServiceMonitor its labels, the flag winning; a bad value from either is
// exit 2 with the same message.
func TestServiceMonitorLabels(t *testing.T) {
	var out bytes.Buffer
	t.Setenv("SERVICE_MONITOR_LABELS", "release=kube-prometheus-stack, team=jvm")
	c, err := parseFlags(nil, &out)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"release": "kube-prometheus-stack", "team": "jvm"}; !maps.Equal(c.svcMonLabels, want) {
		t.Fatalf("SERVICE_MONITOR_LABELS: %v, want %v", c.svcMonLabels, want)
	}
	if len(c.podMonLabels) != 0 {
		t.Fatalf("SERVICE_MONITOR_LABELS reached the PodMonitors: %v", c.podMonLabels)
	}
	if c, err = parseFlags([]string{"--service-monitor-labels=release=kps"}, &out); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"release": "kps"}; !maps.Equal(c.svcMonLabels, want) {
		t.Fatalf("the flag did not win: %v, want %v", c.svcMonLabels, want)
	}

	for _, tc := range []struct{ value, want string }{
		{"release", `--service-monitor-labels: "release" is not key=value`},
		{"bad key=x", `--service-monitor-labels: label key "bad key"`},
		{"release=not ok!", `--service-monitor-labels: label value "not ok!"`},
		{"app.kubernetes.io/component=x", "--service-monitor-labels: metrics: ServiceMonitor label app.kubernetes.io/component is the framework's own"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			t.Setenv("SERVICE_MONITOR_LABELS", "")
			var flagOut, flagErr bytes.Buffer
			flagCode := run([]string{"--service-monitor-labels=" + tc.value}, &flagOut, &flagErr)
			t.Setenv("SERVICE_MONITOR_LABELS", tc.value)
			var envOut, envErr bytes.Buffer
			envCode := run(nil, &envOut, &envErr)
			if flagCode != 2 || envCode != 2 {
				t.Fatalf("exit %d from the flag, %d from the environment; want 2 (stderr %q, %q)", flagCode, envCode, flagErr.String(), envErr.String())
			}
			for _, got := range []string{flagErr.String(), envErr.String()} {
				if !strings.HasPrefix(got, "prometheus-jmx-exporter-operator: ") || !strings.Contains(got, tc.want) {
					t.Errorf("stderr %q, want it to contain %q", got, tc.want)
				}
			}
		})
	}
}

func TestOutsideAClusterWithoutKubeconfigIsAnError(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", "")
	var out, errb bytes.Buffer
	if code := run([]string{"--metrics-addr", "0"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "not in a cluster") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// TestInvalidEnvironmentValuesFailAsFlagsDo: a value the flag refuses is
// refused from its environment variable too, with exit 2, for every kind of
// flag (bool, duration, int) and for the checks after parsing.
func TestInvalidEnvironmentValuesFailAsFlagsDo(t *testing.T) {
	for _, tc := range []struct{ env, value, flag, want string }{
		{"POD_MONITORS", "flase", "-pod-monitors", `invalid value "flase" for environment variable POD_MONITORS (flag -pod-monitors): parse error`},
		{"REPORT_UNSERVED", "yes please", "-report-unserved", "REPORT_UNSERVED"},
		{"INJECTION_TIMEOUT", "2", "-injection-timeout", `invalid value "2" for environment variable INJECTION_TIMEOUT (flag -injection-timeout)`},
		{"INJECTION_TIMEOUT", "2s", "-injection-timeout", "--injection-timeout 2s: at least 10s"},
		{"PARALLELISM", "eight", "-parallelism", "PARALLELISM"},
		{"PARALLELISM", "0", "-parallelism", "--parallelism 0: at least 1"},
		{"RESYNC", "often", "-resync", "RESYNC"},
		{"GRACEFUL_TIMEOUT", "30", "-graceful-timeout", "GRACEFUL_TIMEOUT"},
		{"MAX_ATTEMPTS", "5x", "-max-attempts", "MAX_ATTEMPTS"},
		{"LEADER_ELECTION", "maybe", "-leader-election", `--leader-election "maybe"`},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			var fromFlag, fromFlagErr bytes.Buffer
			flagCode := run([]string{tc.flag + "=" + tc.value}, &fromFlag, &fromFlagErr)
			t.Setenv(tc.env, tc.value)
			var out, errb bytes.Buffer
			code := run(nil, &out, &errb)
			if code != 2 || flagCode != 2 {
				t.Fatalf("exit %d from the environment, %d from the flag; want 2 for both (stderr %q)", code, flagCode, errb.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("stderr %q lacks %q", errb.String(), tc.want)
			}
			if !strings.HasPrefix(errb.String(), "prometheus-jmx-exporter-operator: ") || !strings.HasPrefix(fromFlagErr.String(), "prometheus-jmx-exporter-operator: ") {
				t.Errorf("not in the same style: env %q, flag %q", errb.String(), fromFlagErr.String())
			}
		})
	}
}

// TestEveryFlagHasAnEnvironmentVariable: the help names one per flag, and
// setting it sets the flag (the binding reads the help).
func TestEveryFlagHasAnEnvironmentVariable(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--help"}, &out, &bytes.Buffer{}); code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	blocks := regexp.MustCompile(`(?m)^  -([a-z-]+)[^\n]*\n((?:    [^\n]*\n?)*)`).FindAllStringSubmatch(out.String(), -1)
	if len(blocks) < 20 {
		t.Fatalf("found %d flags in --help", len(blocks))
	}
	for _, b := range blocks {
		if b[1] == "version" {
			continue
		}
		if !regexp.MustCompile(`\(env [A-Z_]+\)`).MatchString(strings.Join(strings.Fields(b[2]), " ")) {
			t.Errorf("--%s names no environment variable in its help", b[1])
		}
	}
	t.Setenv("REPORT_UNSERVED", "false")
	t.Setenv("GRACEFUL_TIMEOUT", "5s")
	c, err := parseFlags(nil, &out)
	if err != nil || c.reportUnserved || c.gracefulTimeout.String() != "5s" {
		t.Fatalf("err %v, report-unserved %v, graceful-timeout %s", err, c.reportUnserved, c.gracefulTimeout)
	}
}

func TestVersionPrintsVersionCommitDateAndGo(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--version"}, &out, &errb); code != 0 {
		t.Fatalf("--version exited %d: %q", code, errb.String())
	}
	if !regexp.MustCompile(`^prometheus-jmx-exporter-operator \S+ \(commit \S+, built \S+, go1\.[0-9.]+\S*\)\n$`).MatchString(out.String()) {
		t.Fatalf("--version printed %q", out.String())
	}
}

func TestAgentImageIsExplicitOnlyWhenSet(t *testing.T) {
	var out bytes.Buffer
	c, err := parseFlags(nil, &out)
	if err != nil || c.agentImageSet {
		t.Fatalf("default: err %v, set %v", err, c.agentImageSet)
	}
	t.Setenv("AGENT_IMAGE", "mirror/jmx-agent:v1")
	if c, err = parseFlags(nil, &out); err != nil || !c.agentImageSet || c.agentImage != "mirror/jmx-agent:v1" {
		t.Fatalf("AGENT_IMAGE: err %v, set %v, image %q", err, c.agentImageSet, c.agentImage)
	}
	t.Setenv("POD_NAME", "")
	im, why, err := chooseAgentImage(t.Context(), nil, config{agentImage: "built-in"})
	if err != nil || im != "built-in" || !strings.Contains(why, "no own pod") {
		t.Fatalf("outside a cluster: %q %q %v", im, why, err)
	}
}

// TestBuildsStampTheVersion: make build and the Dockerfile set the variables
// --version and handlerkit_operator_build_info report.
func TestBuildsStampTheVersion(t *testing.T) {
	for _, f := range []string{"Makefile", "Dockerfile"} {
		data, err := os.ReadFile(filepath.Join("..", "..", f))
		if err != nil {
			t.Fatal(err)
		}
		// The Makefile names the package once, in $(BUILDINFO).
		text := strings.ReplaceAll(string(data), "$(BUILDINFO)", "github.com/handlerkit/handlerkit/internal/buildinfo")
		if f == "Makefile" && !strings.Contains(text, "BUILDINFO := github.com/handlerkit/handlerkit/internal/buildinfo\n") {
			t.Errorf("the Makefile does not set BUILDINFO to the buildinfo package")
		}
		for _, x := range []string{"-X github.com/handlerkit/handlerkit/internal/buildinfo.version=",
			"-X github.com/handlerkit/handlerkit/internal/buildinfo.commit=", "-X github.com/handlerkit/handlerkit/internal/buildinfo.date="} {
			if !strings.Contains(text, x) {
				t.Errorf("%s does not stamp %s", f, x)
			}
		}
	}
}

func TestBuildInfoMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newBuildInfo())
	ver, rev, goVersion := buildInfo()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "handlerkit_operator_build_info" || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v", mfs)
	}
	m := mfs[0].GetMetric()[0]
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	if m.GetGauge().GetValue() != 1 || got["version"] != ver || got["revision"] != rev || got["goversion"] != goVersion {
		t.Fatalf("%v = %v", got, m.GetGauge().GetValue())
	}
}
