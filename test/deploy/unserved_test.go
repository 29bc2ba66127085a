package deploy

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// unservedRequests are the requests of pkg/operator unserved.go (the
// --report-unserved watch), made in namespaces the operator does not serve.
var unservedRequests = []request{
	{"", "list", jmxGroup, exporters, "", "pkg/operator Setup: the unserved-exporters watch"},
	{"", "watch", jmxGroup, exporters, "", "pkg/operator Setup: the unserved-exporters watch"},
	{"", "get", jmxGroup, exporters, "", "query.Get, live before the cache syncs"},
	{"", "update", jmxGroup, exporters, "status", "pkg/operator unserved.go: NotServed"},
}

// TestUnservedClusterRoleIsReadOnlyButStatus: deploy/operator's one
// ClusterRole for the operator (rbac-unserved.yaml), bound as the
// kustomization binds it, lets its ServiceAccount make the unserved watch's
// requests in any namespace and nothing else there: no pods, no exporter
// writes but the status, no Secrets. Every verb is needed. The cluster-wide
// install has no such ClusterRole: it serves every namespace.
func TestUnservedClusterRoleIsReadOnlyButStatus(t *testing.T) {
	env := cluster.Get(t)
	kube := env.Clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	for _, o := range build(t, namespacedInstall) {
		switch {
		case o.GetKind() == "ClusterRole" && o.GetName() == "prometheus-jmx-exporter-operator-unserved":
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
				t.Fatal(err)
			}
		case o.GetKind() == "ClusterRoleBinding" && o.GetName() == "prometheus-jmx-exporter-operator-unserved":
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &binding); err != nil {
				t.Fatal(err)
			}
		}
	}
	if role.Name == "" || binding.Name == "" {
		t.Fatalf("%s has no ClusterRole and ClusterRoleBinding prometheus-jmx-exporter-operator-unserved", namespacedInstall)
	}
	if len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" || binding.Subjects[0].Name != "prometheus-jmx-exporter-operator" ||
		binding.Subjects[0].Namespace != "handlerkit-system" || binding.RoleRef.Name != role.Name {
		t.Errorf("binding: %+v to %+v", binding.Subjects, binding.RoleRef)
	}
	for _, o := range build(t, clusterWideInstall) {
		if o.GetName() == role.Name {
			t.Errorf("%s has %s %s: it serves every namespace and needs none", clusterWideInstall, o.GetKind(), o.GetName())
		}
	}
	other, err := env.CreateNamespace(ctx, "unserved")
	if err != nil {
		t.Fatal(err)
	}

	// The role as shipped, and a copy without each verb, each bound to a
	// user of its own.
	type grant struct{ rule, verb string }
	bindAs := func(user string, rules []rbacv1.PolicyRule) {
		t.Helper()
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{GenerateName: "unserved-test-"}, Rules: rules}
		cr, err := kube.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: "unserved-test-"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
		crb, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
			_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), cr.Name, metav1.DeleteOptions{})
		})
	}
	bindAs("unserved-full", role.Rules)
	var without []grant
	for i, rule := range role.Rules {
		for _, verb := range rule.Verbs {
			rules := slices.Clone(role.Rules)
			rules[i].Verbs = slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return v == verb })
			if len(rules[i].Verbs) == 0 {
				rules = slices.Delete(rules, i, i+1)
			}
			user := fmt.Sprintf("unserved-without-%d", len(without))
			bindAs(user, rules)
			without = append(without, grant{rule.Resources[0], verb})
		}
	}
	// The bindings are in force once each user is allowed a request it
	// keeps (the authorizer's cache catches up in the background).
	for i, g := range without {
		keeps := unservedRequests[slices.IndexFunc(unservedRequests, func(r request) bool { return r.verb != g.verb || r.fullResource() != g.rule })]
		for {
			ok, err := allowed(ctx, kube, fmt.Sprintf("unserved-without-%d", i), other, keeps)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	for _, r := range unservedRequests {
		for _, ns := range []string{other, ""} {
			if ok, err := allowed(ctx, kube, "unserved-full", ns, r); err != nil || !ok {
				t.Errorf("denied %s in namespace %q (%v)", r, ns, err)
			}
		}
	}
	for _, r := range []request{
		{verb: "patch", group: jmxGroup, resource: exporters}, {verb: "update", group: jmxGroup, resource: exporters},
		{verb: "delete", group: jmxGroup, resource: exporters}, {verb: "create", group: jmxGroup, resource: exporters},
		{verb: "update", group: jmxGroup, resource: exporters, subresource: "finalizers"},
		{verb: "patch", group: jmxGroup, resource: exporters, subresource: "status"},
		{verb: "get", resource: "pods"}, {verb: "list", resource: "pods"}, {verb: "patch", resource: "pods"},
		{verb: "patch", resource: "pods", subresource: "ephemeralcontainers"}, {verb: "create", resource: "pods", subresource: "exec"},
		{verb: "get", resource: "configmaps"}, {verb: "get", resource: "secrets"}, {verb: "create", resource: "events"},
	} {
		if ok, err := allowed(ctx, kube, "unserved-full", other, r); err != nil || ok {
			t.Errorf("allowed %s %s/%s in a namespace the operator does not serve (%v)", r.verb, r.resource, r.subresource, err)
		}
	}
	for i, g := range without {
		user := fmt.Sprintf("unserved-without-%d", i)
		for _, r := range unservedRequests {
			needs := r.verb == g.verb && r.fullResource() == g.rule
			ok, err := allowed(ctx, kube, user, other, r)
			if err != nil {
				t.Fatal(err)
			}
			if needs && ok {
				t.Errorf("without %s %s: %s still allowed", g.verb, g.rule, r)
			}
			if !needs && !ok {
				t.Errorf("without %s %s: %s denied too", g.verb, g.rule, r)
			}
		}
	}
}
