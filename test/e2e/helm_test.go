package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// chartDir is the operator's Helm chart.
const chartDir = "charts/prometheus-jmx-exporter-operator"

// helm runs test/helm's helm-release (runHelm: the Helm library's install,
// upgrade and uninstall actions, as test/deploy runs them) against the test
// cluster with args (-namespace, -name, -chart, -values ..., then install,
// upgrade or uninstall), failing the test when it fails.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runHelm(t, args...)
	if err != nil {
		t.Fatalf("helm-release %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// valuesFile writes values (YAML) into a file of the test's and returns its path.
func valuesFile(t *testing.T, values string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// chartValues are the values every e2e release of the chart starts from: the
// CRD is the one TestMain installed (not the release's: Helm would refuse to
// adopt it), one replica (lease election all the same), and the image is the
// one TestMain built from this checkout and loaded into the node under the
// chart's default reference (testimages.AgentRef), so nothing is pulled.
// The report of unserved exporters is off: with it, the release's operator
// watches the exporters of every namespace and writes the status of those
// of other tests' operators, whose state it would race (CI: an exporter
// marked proven answered as unproven for minutes, a claim released late).
const chartValues = "crds: {enabled: false}\nreplicas: 1\nreportUnserved: false\n"

// waitDeploymentReady waits until the Deployment name in ns has a ready
// replica of its current template.
func waitDeploymentReady(t *testing.T, ns, name string) *appsv1.Deployment {
	t.Helper()
	var dep *appsv1.Deployment
	waitFor(t, 4*time.Minute, "Deployment "+ns+"/"+name+" ready", func() (bool, string) {
		d, err := kube.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		dep = d
		return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas >= 1 && d.Status.ReadyReplicas >= 1 &&
				d.Status.Replicas == d.Status.UpdatedReplicas,
			fmt.Sprintf("updated %d, ready %d, replicas %d", d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.Replicas)
	})
	return dep
}

// cleanUpRelease removes, at the end of the test, the cluster-scoped objects
// of release (its ClusterRoles, ClusterRoleBindings and webhook
// configuration, by the chart's label app.kubernetes.io/instance), as a
// best effort for a test that failed before its helm uninstall: the
// namespace's objects go with the namespace, and runHelm cannot run in a
// cleanup, whose test context has ended.
func cleanUpRelease(t *testing.T, ns, release string) {
	t.Cleanup(func() {
		if t.Failed() {
			dumpOperatorLogs(t, ns)
		}
		ctx := context.Background()
		sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release}
		_ = kube.RbacV1().ClusterRoleBindings().DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
		_ = kube.RbacV1().ClusterRoles().DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
		_ = kube.AdmissionregistrationV1().MutatingWebhookConfigurations().DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
	})
}
