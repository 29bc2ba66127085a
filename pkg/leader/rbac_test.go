package leader_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/pkg/leader"
	"github.com/handlerkit/handlerkit/pkg/metrics"
)

func serviceMonitorCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "servicemonitors.monitoring.coreos.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "monitoring.coreos.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "servicemonitors", Singular: "servicemonitor", Kind: "ServiceMonitor", ListKind: "ServiceMonitorList",
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: new(true),
				}},
			}},
		},
	}
}

// serviceAccountWithRules returns credentials of a new ServiceAccount bound, in ns, to a Role with exactly rules.
func serviceAccountWithRules(t *testing.T, ns, name string, rules []rbacv1.PolicyRule) *rest.Config {
	t.Helper()
	ctx := context.Background()
	kube := env.Clientset()
	if len(rules) > 0 {
		if _, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := env.ConfigForServiceAccount(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestPolicyRulesAreEnough runs every code path of this package and metrics.EnsureService with credentials bound
// to nothing but PolicyRules: election in both modes including a stale-lock takeover, the labeler adding and
// removing labels, the Service and ServiceMonitor creation and update, and the Deployment owner walk.
func TestPolicyRulesAreEnough(t *testing.T) {
	ctx := context.Background()
	if err := env.InstallCRDs(ctx, serviceMonitorCRD()); err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	cfg := serviceAccountWithRules(t, ns, "operator", leader.PolicyRules())

	// Without any rule the same calls fail, so the credentials really are subject to RBAC.
	denied := serviceAccountWithRules(t, ns, "nobody", nil)
	if _, err := metrics.EnsureService(ctx, denied, metrics.ServiceOptions{
		OperatorName: "op", Namespace: ns, Selector: operatorLabels, Logger: testLogger(t),
	}); !apierrors.IsForbidden(err) {
		t.Fatalf("EnsureService without rules: %v, want Forbidden", err)
	}

	// A Deployment -> ReplicaSet -> Pod chain, as the controllers would have made it.
	kube := env.Clientset()
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: operatorLabels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "operator:test"}}},
	}
	dep, err := kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "test-operator"},
		Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: operatorLabels}, Template: template},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := kube.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "test-operator-1",
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: operatorLabels}, Template: template},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"op-a", "op-b", "op-c", "op-d"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: operatorLabels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
			Spec: template.Spec,
		}
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	forLife := func(pod string) *leader.ForLife {
		f, err := leader.NewForLife(cfg, lockName, leader.WithNamespace(ns), leader.WithPodName(pod),
			leader.WithRegisterer(prometheus.NewRegistry()), leader.WithBackoff(fastBackoff),
			leader.WithLabelInterval(500*time.Millisecond), leader.WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a := startReplica(t, "op-a", forLife("op-a"))
	eventually(t, 30*time.Second, "op-a leads", a.leading)
	if a.err != nil {
		t.Fatal(a.err)
	}
	eventually(t, 30*time.Second, "op-a labelled", onlyLabelled(t, ns, "op-a"))
	b := startReplica(t, "op-b", forLife("op-b"))
	a.cancel()
	setPodStatus(t, ns, "op-a", corev1.PodFailed, "")
	eventually(t, 30*time.Second, "op-b takes over the stale lock", func() bool {
		select {
		case <-b.done:
			return true
		default:
			return false
		}
	})
	if b.err != nil {
		t.Fatalf("op-b: %v", b.err)
	}
	eventually(t, 30*time.Second, "the label moves to op-b", onlyLabelled(t, ns, "op-b"))

	lease := func(pod string) *leader.Lease {
		l, err := leader.NewLease(cfg, leaseName, leader.WithNamespace(ns), leader.WithPodName(pod),
			leader.WithRegisterer(prometheus.NewRegistry()), leader.WithLeaderLabel("lease-leader", "true"),
			leader.WithLeaseDurations(testLeaseDuration, testRenewDeadline, testRetryPeriod),
			leader.WithLabelInterval(500*time.Millisecond), leader.WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	c := startReplica(t, "op-c", lease("op-c"))
	eventually(t, 30*time.Second, "op-c holds the lease", func() bool {
		select {
		case <-c.done:
			return true
		default:
			return false
		}
	})
	if c.err != nil {
		t.Fatalf("op-c: %v", c.err)
	}
	d := startReplica(t, "op-d", lease("op-d"))
	// Renewals (update) happen while op-c leads: wait for one, seen as a
	// later renewTime, rather than for a time sized to this machine; then
	// cancelling releases the lease (update) for op-d.
	renewTime := func() time.Time {
		l, err := kube.CoordinationV1().Leases(ns).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return time.Time{}
		}
		return l.Spec.RenewTime.Time
	}
	acquired := renewTime()
	if acquired.IsZero() {
		t.Fatal("op-c holds the lease, but the Lease has no renewTime")
	}
	eventually(t, 30*time.Second, "op-c renews the lease", func() bool { return renewTime().After(acquired) })
	c.cancel()
	eventually(t, 30*time.Second, "op-d takes the released lease", d.leading)
	if d.err != nil {
		t.Fatalf("op-d: %v", d.err)
	}
	eventually(t, 30*time.Second, "op-d carries the lease leader label", func() bool {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, "op-d", metav1.GetOptions{})
		return err == nil && p.Labels["lease-leader"] == "true"
	})
	eventually(t, 30*time.Second, "op-c's lease leader label is removed", func() bool {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, "op-c", metav1.GetOptions{})
		return err == nil && p.Labels["lease-leader"] == ""
	})

	for range 2 { // create, then update
		svc, err := metrics.EnsureService(ctx, cfg, metrics.ServiceOptions{
			Namespace: ns, PodName: "op-b", ScrapeOnlyLeader: true, Logger: testLogger(t),
		})
		if err != nil {
			t.Fatalf("EnsureService with PolicyRules: %v", err)
		}
		if len(svc.OwnerReferences) != 1 || svc.OwnerReferences[0].UID != dep.UID {
			t.Errorf("Service owners = %+v, want the Deployment", svc.OwnerReferences)
		}
	}
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(metrics.ServiceMonitorGVR).Namespace(ns).Get(ctx, "test-operator-metrics", metav1.GetOptions{}); err != nil {
		t.Errorf("ServiceMonitor: %v", err)
	}
}
