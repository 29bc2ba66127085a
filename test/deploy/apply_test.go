package deploy

import (
	"context"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/handlerkit/handlerkit/internal/manifest"
)

// manifestSet is what a cluster admin applies in one go: a kustomization
// (kubectl apply -k) or a file (kubectl apply -f), with the namespace of
// objects that name none.
type manifestSet struct {
	kustomization, file, namespace string
}

// manifestSets are every Kubernetes manifest under deploy/. The CRD comes
// first: the sets after it hold its kind.
var manifestSets = []manifestSet{
	{file: "deploy/crds/jmx.handlerkit.dev_prometheusjmxexporters.yaml"},
	{kustomization: "deploy/crds"},
	{kustomization: "deploy"},
	{kustomization: "deploy/operator"},
	{kustomization: "deploy/operator/cluster-wide"},
	{kustomization: "deploy/overlays/local"},
	{kustomization: "deploy/overlays/exec"},
	{kustomization: "deploy/overlays/cluster-wide-exec"},
	{kustomization: "deploy/operator/user-roles"},
	{kustomization: "deploy/samples", namespace: "samples"},
	{file: "deploy/crds/jmx.handlerkit.dev_v1alpha1_prometheusjmxexporter_cr.yaml", namespace: "samples"},
	{file: "deploy/samples/exporter.yaml", namespace: "samples"},
	{file: "deploy/samples/java-app.yaml", namespace: "samples"},
	{file: "deploy/operator/rbac.yaml", namespace: "files"},
	{file: "deploy/operator/rbac-ephemeralcontainer.yaml", namespace: "files"},
	{file: "deploy/overlays/exec/rbac-exec.yaml", namespace: "files"},
	{file: "deploy/operator/user-roles/user-roles.yaml"},
	{file: "deploy/operator/operator.yaml", namespace: "files"},
	{file: "deploy/operator/cluster-wide/operator.yaml", namespace: "files"},
	{file: "deploy/operator/rbac-eviction.yaml", namespace: "files"},
	{file: "deploy/operator/rbac-atstart.yaml", namespace: "files"},
	{file: "deploy/operator/webhook.yaml", namespace: "files"},
	{file: "deploy/operator/cluster-wide/webhook.yaml", namespace: "files"},
}

// notAlone are the YAML files under deploy/ that are not applied alone
// (kubectl apply -f), and why.
var notAlone = map[string]string{
	"deploy/prometheus/kubernetes-pods.yaml": "a Prometheus scrape job, for prometheus.yml",
	// test/e2e (TestAgentDownAlertFires) applies it, where Prometheus
	// Operator's CRDs are installed.
	"deploy/prometheus/prometheus-rule.yaml": "a PrometheusRule: needs Prometheus Operator's CRD",
	// Their ClusterRoleBindings' subjects get the operator's namespace from
	// the kustomization.
	"deploy/operator/cluster-wide/rbac.yaml":                    "kubectl apply -k only",
	"deploy/operator/rbac-unserved.yaml":                        "kubectl apply -k only",
	"deploy/operator/rbac-namespaces.yaml":                      "kubectl apply -k only",
	"deploy/operator/cluster-wide/rbac-namespaces.yaml":         "kubectl apply -k only",
	"deploy/operator/cluster-wide/rbac-ephemeralcontainer.yaml": "kubectl apply -k only",
	"deploy/overlays/cluster-wide-exec/rbac-exec.yaml":          "kubectl apply -k only",
	"deploy/operator/rbac-webhook.yaml":                         "kubectl apply -k only",
	"deploy/operator/cluster-wide/rbac-webhook.yaml":            "kubectl apply -k only",
	"deploy/operator/cluster-wide/rbac-eviction.yaml":           "kubectl apply -k only",
	"deploy/operator/cluster-wide/rbac-atstart.yaml":            "kubectl apply -k only",
	// Patches of the operator's Deployment, for their overlay.
	"deploy/overlays/exec/settings.yaml":              "a patch, kubectl apply -k only",
	"deploy/overlays/cluster-wide-exec/settings.yaml": "a patch, kubectl apply -k only",
	// Not Kubernetes objects: where kustomize's namespace goes.
	"deploy/operator/kustomizeconfig.yaml":              "a kustomize transformer configuration",
	"deploy/operator/cluster-wide/kustomizeconfig.yaml": "a kustomize transformer configuration",
}

func (s manifestSet) String() string { return s.kustomization + s.file }

func (s manifestSet) objects(t testing.TB) []*unstructured.Unstructured {
	if s.kustomization != "" {
		return build(t, s.kustomization)
	}
	return read(t, s.file)
}

// TestEveryManifestListed fails when a YAML file under deploy/ is neither
// applied by TestEveryManifestAppliesDryRunThenForReal nor known not to be
// applied alone.
func TestEveryManifestListed(t *testing.T) {
	var covered []string
	for _, s := range manifestSets {
		if s.file != "" {
			covered = append(covered, s.file)
		}
	}
	err := filepath.WalkDir(filepath.Join(repo, "deploy"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		rel, _ := filepath.Rel(repo, path)
		if filepath.Base(rel) == "kustomization.yaml" {
			if !slices.ContainsFunc(manifestSets, func(s manifestSet) bool { return s.kustomization == filepath.Dir(rel) }) {
				t.Errorf("%s: no test applies this kustomization", rel)
			}
			return nil
		}
		if notAlone[rel] == "" && !slices.Contains(covered, rel) {
			t.Errorf("%s: no test applies this file", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestEveryManifestAppliesDryRunThenForReal applies every manifest set the
// way `kubectl apply --server-side` does: first with a server-side dry run
// (validated, defaulted and admitted, nothing stored), then for real.
func TestEveryManifestAppliesDryRunThenForReal(t *testing.T) {
	env := cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, ns := range []string{"handlerkit-system", "handlerkit-demo", "samples", "files"} {
		_, err := env.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	a, err := manifest.NewApplier(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range manifestSets {
		objs := s.objects(t)
		before, err := a.Missing(ctx, s.namespace, objs...)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if err := a.DryRun(ctx, s.namespace, objs...); err != nil {
			t.Fatalf("%s: server-side dry run: %v", s, err)
		}
		after, err := a.Missing(ctx, s.namespace, objs...)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if len(after) != len(before) {
			t.Errorf("%s: the dry run stored %d objects", s, len(before)-len(after))
		}
		if i == 0 && len(before) == 0 {
			t.Fatalf("%s: the CRD was there before the test", s)
		}
		if err := applyOnceServed(ctx, a, s.namespace, objs); err != nil {
			t.Fatalf("%s: apply: %v", s, err)
		}
		if left, err := a.Missing(ctx, s.namespace, objs...); err != nil || len(left) != 0 {
			t.Fatalf("%s: after apply %d objects are missing (%v)", s, len(left), err)
		}
	}
}

// applyOnceServed applies objs, again while the API server does not serve
// a CRD's kind yet (it serves it a moment after the CRD is stored).
func applyOnceServed(ctx context.Context, a *manifest.Applier, ns string, objs []*unstructured.Unstructured) error {
	for {
		err := a.Apply(ctx, ns, objs...)
		if err == nil || !strings.Contains(err.Error(), "no matches for kind") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
