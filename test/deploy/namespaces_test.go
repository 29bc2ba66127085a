package deploy

import (
	"context"
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// namespacesRole is the ClusterRole by which the operator reads the
// namespaces' opt-out label (rbac-namespaces.yaml in both installs).
const namespacesRole = "prometheus-jmx-exporter-operator-namespaces"

// namespaceRequests are the requests of pkg/operator optout.go: a get of a
// pod's namespace, for its opt-out label (jmx.handlerkit.dev/inject=false).
var namespaceRequests = []request{
	{clusterScope, "get", "", "namespaces", "", "pkg/operator optout.go: the opt-out label of a pod's namespace"},
}

// namespacesRules are namespacesRole's rules: get on namespaces, nothing
// else.
var namespacesRules = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}}}

// namespacesRoleOf returns the namespaces ClusterRole of a kustomization and
// checks that a ClusterRoleBinding binds it to the operator's ServiceAccount.
func namespacesRoleOf(t testing.TB, dir string) rbacv1.ClusterRole {
	t.Helper()
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	for _, o := range build(t, dir) {
		switch {
		case o.GetKind() == "ClusterRole" && o.GetName() == namespacesRole:
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
				t.Fatal(err)
			}
		case o.GetKind() == "ClusterRoleBinding" && o.GetName() == namespacesRole:
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &binding); err != nil {
				t.Fatal(err)
			}
		}
	}
	if role.Name == "" || binding.Name == "" {
		t.Fatalf("%s has no ClusterRole and ClusterRoleBinding %s", dir, namespacesRole)
	}
	if len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" || binding.Subjects[0].Name != "prometheus-jmx-exporter-operator" ||
		binding.Subjects[0].Namespace != "handlerkit-system" || binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != role.Name {
		t.Errorf("%s binding: %+v to %+v", dir, binding.Subjects, binding.RoleRef)
	}
	return role
}

// TestNamespacesClusterRoleOnlyGetsNamespaces: both installs (and the Exec
// opt-ins on top of them) grant the operator get on namespaces, which
// honouring a namespace's opt-out label needs, by a ClusterRole of that one
// rule; bound as shipped, the authorizer allows it and denies listing,
// watching and changing namespaces.
func TestNamespacesClusterRoleOnlyGetsNamespaces(t *testing.T) {
	env := cluster.Get(t)
	kube := env.Clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, dir := range []string{namespacedInstall, clusterWideInstall, namespacedExec, clusterWideExec} {
		if role := namespacesRoleOf(t, dir); !slices.EqualFunc(role.Rules, namespacesRules, func(a, b rbacv1.PolicyRule) bool {
			return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs) &&
				len(a.ResourceNames) == 0 && len(a.NonResourceURLs) == 0
		}) {
			t.Errorf("%s: %s rules %+v, want %+v", dir, namespacesRole, role.Rules, namespacesRules)
		}
	}
	var l layout
	ns, err := env.CreateNamespace(ctx, "nsrole")
	if err != nil {
		t.Fatal(err)
	}
	l.home, l.served = ns, ns
	role := namespacesRoleOf(t, namespacedInstall)
	if err := bindClusterRoles(t, ctx, kube, l, "operator", "-"+ns, map[string]rbacv1.Role{role.Name: {Rules: role.Rules}}); err != nil {
		t.Fatal(err)
	}
	user := l.user("operator")
	for {
		ok, err := allowed(ctx, kube, user, "", namespaceRequests[0])
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("denied %s: %v", namespaceRequests[0], ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, verb := range []string{"list", "watch", "update", "patch", "delete", "create"} {
		r := request{scope: clusterScope, verb: verb, resource: "namespaces"}
		if ok, err := allowed(ctx, kube, user, "", r); err != nil || ok {
			t.Errorf("allowed %s (%v)", r, err)
		}
	}
}
