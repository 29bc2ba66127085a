package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	help := errb.String()
	for _, f := range []string{"-namespaces", "WATCH_NAMESPACE", "-kubeconfig", "-metrics-addr", "-leader-election", "-log-level",
		"-log-format", "-strategies", "-default-strategy", "-injection-timeout", "-parallelism", "-jvm-wait", "-agent-image",
		"-image-pull-policy", "-local-attach-helper", "-local-agent-jar", "-pod-monitors", "POD_MONITORS", "-pod-monitor-labels",
		"-metrics-service", "METRICS_SERVICE", "-breaker-window", "-resync", "-ephemeral-container-budget", "-max-attempts",
		"-allowed-agent-images", "ALLOWED_AGENT_IMAGES", "-agent-path", "-attach-helper-path", "docs/operator.md"} {
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
	help := strings.Split(errb.String(), "\n")
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
		{"--ephemeral-container-budget", "0"},
		{"--max-attempts", "0"},
		{"--allowed-agent-images", "a:1,b c:2"},
		{"--log-level", "loud"},
		{"--metrics-service", "some"},
		{"--metrics-service", "leader", "--leader-election", "none"},
		{"--pod-monitor-labels", "release"},
		{"--pod-monitor-labels", "bad key=x"},
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
	var out, errb bytes.Buffer
	c, err := parseFlags([]string{"--parallelism", "5"}, &out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if c.namespaces != "a,b" || c.parallelism != 5 {
		t.Fatalf("namespaces %q parallelism %d", c.namespaces, c.parallelism)
	}
	if c.strategies != "EphemeralContainer" || len(c.allowedImages) != 0 {
		t.Fatalf("defaults: strategies %q (Exec is opt-in), allowed images %q (only --agent-image)", c.strategies, c.allowedImages)
	}
	if !c.podMonitors || c.metricsService != "every-replica" || len(c.podMonLabels) != 0 {
		t.Fatalf("defaults: pod monitors %v, metrics service %q, labels %v", c.podMonitors, c.metricsService, c.podMonLabels)
	}
	t.Setenv("ALLOWED_AGENT_IMAGES", "jmx-agent:v2, jmx-agent@sha256:0")
	if c, err = parseFlags(nil, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if len(c.allowedImages) != 2 || c.allowedImages[1] != "jmx-agent@sha256:0" {
		t.Fatalf("ALLOWED_AGENT_IMAGES: %q", c.allowedImages)
	}
	t.Setenv("POD_MONITORS", "false")
	t.Setenv("POD_MONITOR_LABELS", "release=kps, team=jvm")
	if c, err = parseFlags([]string{"--metrics-service", "leader"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if c.podMonitors || c.metricsService != "leader" || c.podMonLabels["release"] != "kps" || c.podMonLabels["team"] != "jvm" {
		t.Fatalf("pod monitors %v, metrics service %q, labels %v", c.podMonitors, c.metricsService, c.podMonLabels)
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
