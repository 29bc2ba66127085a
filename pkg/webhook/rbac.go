package webhook

import rbacv1 "k8s.io/api/rbac/v1"

// PolicyRules returns the namespaced RBAC rules a CertManager needs in the
// operator's namespace (a Role there), the same list as docs/webhook.md:
// get, list, watch and update of the one Secret, by name, and create of
// Secrets, which RBAC cannot restrict to a name (the name of an object to be
// created is not part of what the authorizer is asked). With ExternalCerts
// only get, list and watch are needed. The list and watch rules match the
// manager's requests because they carry the field selector
// metadata.name=<secretName>.
func PolicyRules(secretName string, externalCerts bool) []rbacv1.PolicyRule {
	if externalCerts {
		return []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secretName}, Verbs: []string{"get", "list", "watch"}},
		}
	}
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secretName}, Verbs: []string{"get", "list", "watch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
	}
}

// ClusterPolicyRules returns the cluster-wide rules (a ClusterRole) a
// CertManager with a WebhookConfigName needs: get, list, watch and patch of
// that one MutatingWebhookConfiguration. With ExternalCerts, or without a
// WebhookConfigName, it needs none.
func ClusterPolicyRules(webhookConfigName string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"},
			ResourceNames: []string{webhookConfigName}, Verbs: []string{"get", "list", "watch", "patch"}},
	}
}
