package leader

import rbacv1 "k8s.io/api/rbac/v1"

// PolicyRules returns the namespaced RBAC rules an operator using this package and metrics.EnsureService needs,
// the same list as the package documentation. deploy/ manifests are generated from, or checked against, it.
func PolicyRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "watch", "create", "delete"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{"monitoring.coreos.com"}, Resources: []string{"servicemonitors"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"get"}},
	}
}

// ClusterPolicyRules returns the cluster-wide rules leader-for-life mode uses besides PolicyRules: reading nodes,
// to take over from a holder stuck Terminating on a node that is gone or NotReady. Without them that takeover
// waits until the holder's pod is really gone; everything else works.
func ClusterPolicyRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
	}
}
