package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/handlerkit/handlerkit/internal/testbuild"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// The e2e tests use Prometheus Operator's own code, and Prometheus' PromQL
// parser, from test/monitoring, a module of its own whose dependency graph
// stays out of handlerkit's go.mod: its commands are built once per test
// binary, and the CRDs come from the same Prometheus Operator module.

// monitoringModule is the test-only module's directory.
func monitoringModule() string { return filepath.Join(repoRoot, "test", "monitoring") }

// goCommand runs the go command in dir with the settings that make the
// result independent of the caller's environment, and returns its stdout.
func goCommand(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return out, nil
}

// monitoringCRDs are the PodMonitor, ServiceMonitor and PrometheusRule CRDs
// exactly as the Prometheus Operator module that test/monitoring requires
// ships them (example/prometheus-operator-crd in its module zip).
func monitoringCRDs(ctx context.Context) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	out, err := goCommand(ctx, monitoringModule(), "mod", "download", "-json", "github.com/prometheus-operator/prometheus-operator")
	if err != nil {
		return nil, err
	}
	var mod struct{ Dir, Version string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return nil, fmt.Errorf("go mod download: %v: %s", err, out)
	}
	all, err := testenv.ReadCRDs(filepath.Join(mod.Dir, "example", "prometheus-operator-crd"))
	if err != nil {
		return nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, c := range all {
		switch c.Name {
		case "podmonitors.monitoring.coreos.com", "servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com":
			crds = append(crds, c)
		}
	}
	if len(crds) != 3 {
		return nil, fmt.Errorf("prometheus-operator %s ships %d of the PodMonitor, ServiceMonitor and PrometheusRule CRDs, want 3", mod.Version, len(crds))
	}
	return crds, nil
}

// monitoringTools builds test/monitoring's commands once per test binary.
var monitoringTools struct {
	once sync.Once
	dir  string
	err  error
}

// buildMonitoringTools builds test/monitoring's commands, once per test
// binary (TestMain starts it beside the cluster's start).
func buildMonitoringTools(ctx context.Context) {
	monitoringTools.once.Do(func() {
		start := time.Now()
		dir, err := os.MkdirTemp("", "handlerkit-e2e-tools-")
		if err != nil {
			monitoringTools.err = err
			return
		}
		monitoringTools.dir = dir
		// With this test binary's flags (testbuild.Flags), so that
		// test/monitoring's own tests find its packages compiled; kept
		// between runs (testbuild.Build), so a warm run links none. The
		// environment is goCommand's.
		_, monitoringTools.err = testbuild.Build(ctx, monitoringModule(), dir, testbuild.Flags(),
			[]string{"GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false"}, "./cmd/...")
		fmt.Fprintf(os.Stderr, "e2e: test/monitoring's commands built in %s\n", time.Since(start).Round(time.Millisecond))
	})
}

// monitoringTool returns the path of one of test/monitoring's commands
// (scrapeconfig, dashboardqueries), building them on first use.
func monitoringTool(t *testing.T, name string) string {
	t.Helper()
	buildMonitoringTools(context.Background())
	if monitoringTools.err != nil {
		t.Fatal(monitoringTools.err)
	}
	return filepath.Join(monitoringTools.dir, name)
}

// removeMonitoringTools deletes the built commands (TestMain, at the end).
func removeMonitoringTools() {
	if monitoringTools.dir != "" {
		os.RemoveAll(monitoringTools.dir)
	}
}

// runTool runs a test/monitoring command with stdin and returns its stdout.
func runTool(t *testing.T, name string, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), monitoringTool(t, name), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, stderr.String())
	}
	return out
}
