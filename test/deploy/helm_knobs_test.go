package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/handlerkit/handlerkit/internal/manifest"
)

// renderChartAs is renderChart for release name.
func renderChartAs(t *testing.T, name, namespace, values string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	vals := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(vals, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helmRender.built(t), "-chart", filepath.Join(repo, chartDir), "-name", name, "-namespace", namespace,
		"-values", vals)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, stderr.String())
	}
	objs, err := manifest.Decode(stdout.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return objs, nil
}

// TestHelmChartKnobsApplyToTheAPIServer renders the chart for a release
// name of 53 characters (Helm's longest) with issue 42's knobs: the
// webhook's failurePolicy Fail, port, and selectors added to the chart's
// own, extraEnv, and the NetworkPolicy; the API server accepts every object
// (a server-side dry run: a webhook that fails closed is not left in the
// shared cluster) and the operator's leader lock, created as a Lease and as
// a ConfigMap (for-life), by that name. serviceAccount.create=false without
// a name is refused.
func TestHelmChartKnobsApplyToTheAPIServer(t *testing.T) {
	env := cluster.Get(t)
	waitForHelmCommands(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ns = "helm-knobs"
	createNamespaces(ctx, t, env, ns)
	name := strings.Repeat("r", 53)
	objs, err := renderChartAs(t, name, ns, `crds: {enabled: false}
webhook:
  failurePolicy: Fail
  port: 10443
  namespaceSelector:
    matchLabels: {team: jvm}
    matchExpressions: [{key: tier, operator: In, values: [prod]}]
  objectSelector:
    matchExpressions: [{key: app, operator: Exists}]
extraEnv:
- {name: GOMEMLIMIT, value: 200MiB}
- name: NODE
  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
networkPolicy:
  enabled: true
  metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
  apiServer: {cidrs: [10.0.0.1/32, "fd00::1/128"]}
  extraEgress: [{ports: [{port: 443, protocol: TCP}]}]
`)
	if err != nil {
		t.Fatal(err)
	}
	var lock string
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
		if o.GetKind() != "Deployment" {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, a := range cs[0].(map[string]any)["args"].([]any) {
			if v, ok := strings.CutPrefix(a.(string), "--leader-lock="); ok {
				lock = v
			}
		}
	}
	if !kinds["NetworkPolicy"] || !kinds["MutatingWebhookConfiguration"] || lock == "" {
		t.Fatalf("kinds %v, lock %q", kinds, lock)
	}
	a, err := manifest.NewApplier(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(objs, func(x, y *unstructured.Unstructured) int {
		return slices.Index(kindOrder, x.GetKind()) - slices.Index(kindOrder, y.GetKind())
	})
	if err := a.DryRun(ctx, ns, objs...); err != nil {
		t.Fatalf("server-side dry run: %v", err)
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if _, err := env.Clientset().CoordinationV1().Leases(ns).Create(ctx,
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: lock}}, dry); err != nil {
		t.Errorf("a Lease named %q: %v", lock, err)
	}
	if _, err := env.Clientset().CoreV1().ConfigMaps(ns).Create(ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: lock}}, dry); err != nil {
		t.Errorf("a ConfigMap named %q: %v", lock, err)
	}
	if !strings.Contains(lock, "jmx-exporter-operator") {
		t.Errorf("lock %q lacks jmx-exporter-operator, which HandlerkitOperatorNotLeading matches", lock)
	}
	if _, err := renderChartAs(t, name, ns, "serviceAccount: {create: false}\n"); err == nil ||
		!strings.Contains(err.Error(), "serviceAccount.name") {
		t.Errorf("serviceAccount.create=false without a name: err %v, want one asking for serviceAccount.name", err)
	}
}
