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
	"k8s.io/client-go/kubernetes"
)

// TestClusterWideIsTheNamespacedRBACEverywhere keeps deploy/operator/cluster-wide
// equal to deploy/operator, and deploy/overlays/cluster-wide-exec to
// deploy/overlays/exec, but for scope: their ClusterRoles hold the served
// namespace's Roles' rules, their home Role is the same, and their
// Deployment differs only in serving every namespace (WATCH_NAMESPACE empty).
func TestClusterWideIsTheNamespacedRBACEverywhere(t *testing.T) {
	for nsDir, cwDir := range map[string]string{namespacedInstall: clusterWideInstall, namespacedExec: clusterWideExec} {
		nsRoles := roles(t, nsDir, "Role")
		cwClusterRoles := roles(t, cwDir, "ClusterRole")
		cwRoles := roles(t, cwDir, "Role")
		for name, want := range nsRoles {
			got, ok := cwClusterRoles[name]
			if roleScopes[name] == home {
				got, ok = cwRoles[name]
			}
			if !ok {
				t.Errorf("%s: no %s", cwDir, name)
				continue
			}
			if !reflect.DeepEqual(got.Rules, want.Rules) {
				t.Errorf("%s %s rules\n%v\nwant those of %s\n%v", cwDir, name, got.Rules, nsDir, want.Rules)
			}
		}
		if len(cwClusterRoles)+len(cwRoles) != len(nsRoles) {
			t.Errorf("%s: %d ClusterRoles and %d Roles, want %d in all, as %s", cwDir, len(cwClusterRoles), len(cwRoles), len(nsRoles), nsDir)
		}
		checkBindings(t, cwDir, "ClusterRoleBinding", cwClusterRoles)
		checkBindings(t, cwDir, "RoleBinding", cwRoles)
		if got, want := settings(t, cwDir), settings(t, nsDir); !reflect.DeepEqual(got, want) {
			t.Errorf("%s settings %v, %s's %v", cwDir, got, nsDir, want)
		}

		nsDep, cwDep := deployment(t, nsDir), deployment(t, cwDir)
		if watch := envVar(t, cwDep, "WATCH_NAMESPACE"); watch.Value != "" || watch.ValueFrom != nil {
			t.Errorf("%s WATCH_NAMESPACE %+v, want empty (every namespace)", cwDir, watch)
		}
		if watch := envVar(t, nsDep, "WATCH_NAMESPACE"); watch.ValueFrom == nil || watch.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
			t.Errorf("%s WATCH_NAMESPACE %+v, want the pod's namespace", nsDir, watch)
		}
		for _, d := range []*appsv1.Deployment{nsDep, cwDep} {
			c := &d.Spec.Template.Spec.Containers[0]
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "WATCH_NAMESPACE" })
		}
		if !reflect.DeepEqual(nsDep, cwDep) {
			t.Errorf("the %s Deployment differs from %s's in more than WATCH_NAMESPACE", cwDir, nsDir)
		}
	}
}

// TestClusterWideRBACServesEveryNamespaceButReadsNoSecrets binds
// deploy/operator/cluster-wide's RBAC, and deploy/overlays/cluster-wide-exec's
// to another ServiceAccount, and asks the API server's authorizer: the
// operator may make its served-namespace requests in any namespace, its home
// requests at home, and reads no Secrets anywhere; pods/exec only with the
// Exec opt-in.
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
	sas := map[string][]request{"operator": defaultRequests(), "operator-exec": operatorRequests}
	for sa, dir := range map[string]string{"operator": clusterWideInstall, "operator-exec": clusterWideExec} {
		suffix := "-" + sa + "-" + l.home
		if err := bindClusterRoles(t, ctx, kube, l, sa, suffix, roles(t, dir, "ClusterRole")); err != nil {
			t.Fatal(err)
		}
		if err := bind(ctx, kube, l, sa, suffix, roles(t, dir, "Role")); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitCaughtUp(ctx, kube, l, "test-sentinel"); err != nil {
		t.Fatal(err)
	}
	for _, servedNS := range []string{l.served, another} {
		l := layout{home: l.home, served: servedNS}
		for sa, requests := range sas {
			for _, r := range denied(ctx, t, kube, l, l.user(sa), requests) {
				t.Errorf("cluster-wide RBAC (%s) denies %s (served namespace %s)", sa, r, servedNS)
			}
			for _, verb := range []string{"get", "list", "watch"} {
				for _, s := range []scope{served, home} {
					r := request{scope: s, verb: verb, resource: "secrets"}
					if ok, err := allowed(ctx, kube, l.user(sa), l.ns(s), r); err != nil || ok {
						t.Errorf("cluster-wide RBAC (%s) allows %s (%v)", sa, r, err)
					}
				}
			}
		}
		for _, s := range []scope{served, home} {
			if ok, err := allowed(ctx, kube, l.user("operator"), l.ns(s), execRequest); err != nil || ok {
				t.Errorf("the default cluster-wide install allows create pods/exec in the %s namespace %s (%v)", s, l.ns(s), err)
			}
		}
	}
}

// bindClusterRoles creates the ClusterRoles rs, renamed with suffix, each
// bound by a ClusterRoleBinding to ServiceAccount sa of the home namespace,
// and deletes them when t ends.
func bindClusterRoles(t *testing.T, ctx context.Context, kube kubernetes.Interface, l layout, sa, suffix string, rs map[string]rbacv1.Role) error {
	for name, r := range rs {
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name + suffix}, Rules: r.Rules}
		if _, err := kube.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
			return err
		}
		t.Cleanup(func() { _ = kube.RbacV1().ClusterRoles().Delete(context.Background(), cr.Name, metav1.DeleteOptions{}) })
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + suffix},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: l.home}}}
		if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			return err
		}
		t.Cleanup(func() {
			_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
		})
	}
	return nil
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
