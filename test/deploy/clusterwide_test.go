package deploy

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestClusterWideIsTheNamespacedRBACEverywhere keeps deploy/operator/cluster-wide
// equal to deploy/operator, but for scope: its ClusterRoles hold the served
// namespace's Roles' rules, its home Role is the same, and its Deployment
// differs only in serving every namespace (WATCH_NAMESPACE empty).
func TestClusterWideIsTheNamespacedRBACEverywhere(t *testing.T) {
	nsRoles := roles(t, "deploy/operator", "Role")
	cwClusterRoles := roles(t, "deploy/operator/cluster-wide", "ClusterRole")
	cwRoles := roles(t, "deploy/operator/cluster-wide", "Role")
	for name, s := range roleScopes {
		want := nsRoles[name].Rules
		got, ok := cwClusterRoles[name]
		if s == home {
			got, ok = cwRoles[name]
		}
		if !ok {
			t.Errorf("cluster-wide: no %s", name)
			continue
		}
		if !reflect.DeepEqual(got.Rules, want) {
			t.Errorf("cluster-wide %s rules\n%v\nwant those of deploy/operator\n%v", name, got.Rules, want)
		}
	}
	if len(cwClusterRoles)+len(cwRoles) != len(roleScopes) {
		t.Errorf("cluster-wide: %d ClusterRoles and %d Roles, want %d in all", len(cwClusterRoles), len(cwRoles), len(roleScopes))
	}
	checkBindings(t, "deploy/operator/cluster-wide", "ClusterRoleBinding", cwClusterRoles)
	checkBindings(t, "deploy/operator/cluster-wide", "RoleBinding", cwRoles)

	nsDep, cwDep := deployment(t, "deploy/operator"), deployment(t, "deploy/operator/cluster-wide")
	if watch := envVar(t, cwDep, "WATCH_NAMESPACE"); watch.Value != "" || watch.ValueFrom != nil {
		t.Errorf("cluster-wide WATCH_NAMESPACE %+v, want empty (every namespace)", watch)
	}
	if watch := envVar(t, nsDep, "WATCH_NAMESPACE"); watch.ValueFrom == nil || watch.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("namespaced WATCH_NAMESPACE %+v, want the pod's namespace", watch)
	}
	for _, d := range []*appsv1.Deployment{nsDep, cwDep} {
		c := &d.Spec.Template.Spec.Containers[0]
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "WATCH_NAMESPACE" })
	}
	if !reflect.DeepEqual(nsDep, cwDep) {
		t.Errorf("the cluster-wide Deployment differs from deploy/operator's in more than WATCH_NAMESPACE")
	}
}

// TestClusterWideRBACServesEveryNamespaceButReadsNoSecrets binds
// deploy/operator/cluster-wide's RBAC and asks the API server's authorizer:
// the operator may make its served-namespace requests in any namespace, its
// home requests at home, and reads no Secrets anywhere.
func TestClusterWideRBACServesEveryNamespaceButReadsNoSecrets(t *testing.T) {
	env := cluster.Get(t)
	kube := env.Clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var l layout
	var another string
	for _, p := range []*string{&l.home, &l.served, &another} {
		ns, err := env.CreateNamespace(ctx, "cw")
		if err != nil {
			t.Fatal(err)
		}
		*p = ns
	}
	const sa = "operator"
	suffix := "-" + l.home
	for name, r := range roles(t, "deploy/operator/cluster-wide", "ClusterRole") {
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name + suffix}, Rules: r.Rules}
		if _, err := kube.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kube.RbacV1().ClusterRoles().Delete(context.Background(), cr.Name, metav1.DeleteOptions{}) })
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + suffix},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: l.home}}}
		if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
		})
	}
	if err := bind(ctx, kube, l, sa, "", roles(t, "deploy/operator/cluster-wide", "Role")); err != nil {
		t.Fatal(err)
	}
	if err := waitCaughtUp(ctx, kube, l, "test-sentinel"); err != nil {
		t.Fatal(err)
	}
	for _, servedNS := range []string{l.served, another} {
		l := layout{home: l.home, served: servedNS}
		for _, r := range denied(ctx, t, kube, l, l.user(sa), operatorRequests) {
			t.Errorf("cluster-wide RBAC denies %s (served namespace %s)", r, servedNS)
		}
		for _, verb := range []string{"get", "list", "watch"} {
			for _, s := range []scope{served, home} {
				r := request{scope: s, verb: verb, resource: "secrets"}
				if ok, err := allowed(ctx, kube, l.user(sa), l.ns(s), r); err != nil || ok {
					t.Errorf("cluster-wide RBAC allows %s (%v)", r, err)
				}
			}
		}
	}
}

// deployment is the Deployment of a kustomization.
func deployment(t testing.TB, dir string) *appsv1.Deployment {
	t.Helper()
	var out []*appsv1.Deployment
	for _, o := range build(t, dir) {
		if o.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, &d)
	}
	if len(out) != 1 {
		t.Fatalf("%s: %d Deployments, want 1", dir, len(out))
	}
	return out[0]
}

// envVar is the operator container's environment variable name.
func envVar(t testing.TB, d *appsv1.Deployment, name string) corev1.EnvVar {
	t.Helper()
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("%s: no %s in the operator's environment", d.Name, name)
	return corev1.EnvVar{}
}
