package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/handlerkit/handlerkit/pkg/images/testimages"
)

// TestUninstallLeavesOnlyTheCRD installs the operator, uses it (an exporter
// selects a JVM pod, which is injected and scraped), uninstalls it and lists
// what is left once the garbage collector is done: every object in the
// operator's namespace and every cluster-scoped object of the install.
// Nothing may be left but what the test made itself (the JVM pod) and what
// every namespace holds (its default ServiceAccount, kube-root-ca.crt,
// Events, which expire): no Lease, no webhook Secret, no metrics Service.
// The CRD, kept on purpose, is TestMain's and outside what is listed. Two
// installs: deploy/'s manifests as deployOperator and installWebhook apply
// them, removed object by object as `kubectl delete -k` does (background
// propagation); and the chart with test/helm's helm-release, removed with
// its uninstall. Red before the operator's Deployment owned the Lease and
// the Secret: both were listed.
func TestUninstallLeavesOnlyTheCRD(t *testing.T) {
	t.Parallel()
	runTogether(t,
		subtest{"Kustomize", func(t *testing.T) {
			op := deployAtStartOperator(t, "e2e-uninstall")
			use(t, op.ns)
			deleteManifests(t, op.ns, append(append(slices.Clone(rbacFiles), "deploy/operator/operator.yaml"), webhookFiles...))
			nothingLeft(t, op.ns, "-"+op.ns)
		}},
		subtest{"Helm", func(t *testing.T) {
			ns := newNamespace(t, "e2e-uninstall-helm", nil)
			release := "u" + ns[strings.LastIndex(ns, "-")+1:]
			helm(t, "-namespace", ns, "-name", release, "-chart", filepath.Join(repoRoot, chartDir), "-values", valuesFile(t, chartValues), "install")
			cleanUpRelease(t, ns, release)
			waitDeploymentReady(t, ns, release+"-"+operatorName)
			use(t, ns)
			helm(t, "-namespace", ns, "-name", release, "uninstall")
			nothingLeft(t, ns, release+"-")
		}},
	)
}

// use makes the operator of ns work: an exporter selects a JVM pod, which is
// injected and scraped; then the exporter is deleted while the operator runs
// (its finalizer needs the operator: docs/install.md, Uninstall).
func use(t *testing.T, ns string) {
	t.Helper()
	labels := map[string]string{"app": "uninstall"}
	createExporter(t, ns, exporter("uninstall", labels))
	createPod(t, ns, jvmPod("jvm", labels, testimages.JVMAppRef))
	waitRunning(t, ns, "jvm")
	ep := endpointOf(t, ns, "uninstall", "jvm")
	waitScrape(t, ep.PodIP, ep.Port, heapMetric)
	if err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Delete(t.Context(), "uninstall", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the exporter let go by its finalizer", func() (bool, string) {
		_, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Get(t.Context(), "uninstall", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// deleteManifests deletes the objects of the manifests in rel as
// deployOperator and installWebhook created them (namespaced ones in ns,
// cluster-scoped ones renamed after ns), with kubectl delete's background
// propagation, every one of them at once as `kubectl delete -k` does.
func deleteManifests(t *testing.T, ns string, rels []string) {
	t.Helper()
	ctx := t.Context()
	bg := metav1.DeleteOptions{PropagationPolicy: ptrTo(metav1.DeletePropagationBackground)}
	for _, rel := range rels {
		for _, obj := range decodeManifests(t, rel) {
			var err error
			switch o := obj.(type) {
			case *corev1.ServiceAccount:
				err = kube.CoreV1().ServiceAccounts(ns).Delete(ctx, o.Name, bg)
			case *corev1.Service:
				err = kube.CoreV1().Services(ns).Delete(ctx, o.Name, bg)
			case *rbacv1.Role:
				err = kube.RbacV1().Roles(ns).Delete(ctx, o.Name, bg)
			case *rbacv1.RoleBinding:
				err = kube.RbacV1().RoleBindings(ns).Delete(ctx, o.Name, bg)
			case *rbacv1.ClusterRole:
				err = kube.RbacV1().ClusterRoles().Delete(ctx, o.Name+"-"+ns, bg)
			case *rbacv1.ClusterRoleBinding:
				err = kube.RbacV1().ClusterRoleBindings().Delete(ctx, o.Name+"-"+ns, bg)
			case *admissionregistrationv1.MutatingWebhookConfiguration:
				err = kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, webhookConfigName+"-"+ns, bg)
			case *appsv1.Deployment:
				err = kube.AppsV1().Deployments(ns).Delete(ctx, o.Name, bg)
			default:
				t.Fatalf("%s: unexpected %T", rel, obj)
			}
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("%s: delete: %v", rel, err)
			}
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// clusterScoped are the cluster-scoped kinds an install makes.
var clusterScoped = []schema.GroupVersionResource{
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"},
}

// nothingLeft waits for the garbage collector and then fails, listing them,
// unless every object left in ns is one the test made (the pod jvm) or that
// every namespace holds, and no cluster-scoped object of the install
// (named with mark) is left.
func nothingLeft(t *testing.T, ns, mark string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	expected := func(r schema.GroupVersionResource, name string) bool {
		switch {
		case r.Resource == "events":
			return true // they expire (--event-ttl), as every Event
		case r.Group == "" && r.Resource == "pods" && name == "jvm":
			return true // the test's
		case r.Group == "" && r.Resource == "serviceaccounts" && name == "default",
			r.Group == "" && r.Resource == "configmaps" && name == "kube-root-ca.crt":
			return true // every namespace's
		}
		return false
	}
	var left []string
	waitFor(t, 4*time.Minute, "nothing of the install left in "+ns, func() (bool, string) {
		left = nil
		lists, err := kube.Discovery().ServerPreferredNamespacedResources()
		if err != nil && len(lists) == 0 {
			return false, err.Error()
		}
		for _, l := range lists {
			gv, err := schema.ParseGroupVersion(l.GroupVersion)
			if err != nil {
				continue
			}
			for _, r := range l.APIResources {
				if !slices.Contains(r.Verbs, "list") || strings.Contains(r.Name, "/") {
					continue
				}
				gvr := gv.WithResource(r.Name)
				objs, err := dyn.Resource(gvr).Namespace(ns).List(t.Context(), metav1.ListOptions{})
				if err != nil {
					continue
				}
				for _, o := range objs.Items {
					if !expected(gvr, o.GetName()) {
						left = append(left, fmt.Sprintf("%s %s", r.Kind, o.GetName()))
					}
				}
			}
		}
		for _, gvr := range clusterScoped {
			objs, err := dyn.Resource(gvr).List(t.Context(), metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, o := range objs.Items {
				if strings.Contains(o.GetName(), mark) {
					left = append(left, fmt.Sprintf("%s %s", gvr.Resource, o.GetName()))
				}
			}
		}
		slices.Sort(left)
		return len(left) == 0, fmt.Sprint("left: ", left)
	})
	// The JVM pod keeps running: the uninstall never touched it.
	if p := waitRunning(t, ns, "jvm"); p.Status.Phase != corev1.PodRunning {
		t.Errorf("the JVM pod is %s after the uninstall", p.Status.Phase)
	}
}
