package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
)

// previousChart is the chart before release versioning (0.1.0), a copy in
// test/helm's test data (see its Chart.yaml).
const previousChart = "test/helm/testdata/chart-previous"

// TestHelmUpgradeFromThePreviousChartKeepsExportersWorking installs the
// previous chart, has an exporter inject a running JVM pod, upgrades the
// release to the current chart with helm upgrade and checks that the JVM is
// still scraped, the exporter stays Ready and a new pod gets the agent.
// The image is the current test image in both releases (the one TestMain
// built from this checkout; the previous chart is given its tag, since no
// image of the previous version is built here): what is tested is the
// chart's upgrade, under the current operator. That operator needs one rule
// the previous chart lacks (get on namespaces, for the opt-out label): the
// test shows the exporter Degraded without it, grants it by hand as
// UPGRADING.md tells an admin who runs the new image first, and takes it
// away after the upgrade, whose chart carries its own.
func TestHelmUpgradeFromThePreviousChartKeepsExportersWorking(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-upgrade", nil)
	release := "g" + ns[strings.LastIndex(ns, "-")+1:]
	full := release + "-" + operatorName
	tag := testimages.AgentRef[strings.LastIndex(testimages.AgentRef, ":")+1:]
	values := valuesFile(t, chartValues+"image: {tag: "+tag+"}\n")
	helm(t, "-namespace", ns, "-name", release, "-chart", filepath.Join(repoRoot, previousChart), "-values", values, "install")
	cleanUpRelease(t, ns, release)
	waitDeploymentReady(t, ns, full)

	labels := map[string]string{"app": "upgrade"}
	createExporter(t, ns, exporter("upgrade", labels))
	createPod(t, ns, jvmPod("jvm", labels, testimages.JVMAppRef))
	waitRunning(t, ns, "jvm")
	// The upgrade fact (UPGRADING.md): the current operator under the
	// previous chart's RBAC, which has no get on namespaces, fails closed
	// and does nothing to the namespace's pods; the admin who runs the new
	// image before the new chart grants that rule by hand, as here. The
	// grant goes again after the upgrade, whose chart must carry it.
	waitCondition(t, ns, "upgrade", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonNamespaceUnreadable, 3*time.Minute)
	removeGrant := grantNamespaceRead(t, ns, full)
	ep := endpointOf(t, ns, "upgrade", "jvm")
	waitScrape(t, ep.PodIP, ep.Port, heapMetric)
	waitCondition(t, ns, "upgrade", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected, 3*time.Minute)

	helm(t, "-namespace", ns, "-name", release, "-chart", filepath.Join(repoRoot, chartDir), "-values", values, "upgrade")
	dep := waitDeploymentReady(t, ns, full)
	if got := dep.Labels["helm.sh/chart"]; got != "" && !strings.HasSuffix(got, "-0.2.0") {
		t.Errorf("after the upgrade the Deployment is of chart %s", got)
	}
	removeGrant()
	waitScrape(t, ep.PodIP, ep.Port, heapMetric)
	holds(t, 20*time.Second, "the exporter stays Ready", func() (bool, string) {
		ex := getExporter(t, ns, "upgrade")
		for _, c := range ex.Status.Conditions {
			if c.Type == jmxv1alpha1.ConditionReady {
				return c.Status == metav1.ConditionTrue, fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message)
			}
		}
		return false, "no Ready condition"
	})
	createPod(t, ns, jvmPod("jvm-after", labels, testimages.JVMAppRef))
	waitRunning(t, ns, "jvm-after")
	after := endpointOf(t, ns, "upgrade", "jvm-after")
	waitScrape(t, after.PodIP, after.Port, heapMetric)
	helm(t, "-namespace", ns, "-name", release, "uninstall")
}

// grantNamespaceRead binds the ServiceAccount sa of ns to a ClusterRole that
// lets it get the namespace ns (what deploy/operator/rbac-namespaces.yaml
// and the current chart grant), and returns what removes both again.
func grantNamespaceRead(t *testing.T, ns, sa string) func() {
	t.Helper()
	ctx := t.Context()
	name := "e2e-upgrade-namespaces-" + ns
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{ns}, Verbs: []string{"get"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	remove := func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	t.Cleanup(remove)
	return remove
}
