package webhook_test

import (
	"context"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/handlerkit/handlerkit/pkg/webhook"
)

// operatorOwner is an owner reference to an operator Deployment of the fixture's namespace. The Deployment need
// not exist: no garbage collector runs in this environment, and the API server does not check owners.
func operatorOwner() *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "operator", UID: types.UID("0b5e2b0c-0000-4000-8000-000000000001")}
}

// secretOwnedBy says whether the fixture's Secret carries owner, unchanged (no controller, no
// blockOwnerDeletion, which would need update on deployments/finalizers).
func secretOwnedBy(f *fixture, owner *metav1.OwnerReference) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		sec, err := f.admin.CoreV1().Secrets(f.id).Get(ctx, secretName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return slices.Contains(sec.OwnerReferences, *owner), nil
	}
}

// TestTheSecretIsOwnedByTheOperator: with CertOptions.Owner the Secret a manager creates is owned by it, and an
// existing ownerless Secret (an earlier version's) gets the reference without a new CA or certificate, so that
// the garbage collector deletes the Secret and its CA's private key with the operator. With ExternalCerts the
// Secret is the issuer's and stays as it is.
func TestTheSecretIsOwnedByTheOperator(t *testing.T) {
	owner := operatorOwner()

	f := newFixture(t, false)
	opts := f.certOptions()
	opts.Owner = owner
	f.startReplica("a", opts, nil)
	waitFor(t, "the created Secret is owned", secretOwnedBy(f, owner))

	g := newFixture(t, false)
	g.startReplica("old", g.certOptions(), nil)
	waitFor(t, "the old version's Secret", func(ctx context.Context) (bool, error) {
		s, err := g.stored(ctx)
		return err == nil && s.signer != nil, nil
	})
	before, err := g.stored(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(before.secret.OwnerReferences) != 0 {
		t.Fatalf("without Owner the Secret is owned: %+v", before.secret.OwnerReferences)
	}
	opts = g.certOptions()
	opts.Owner = owner
	g.startReplica("new", opts, nil)
	waitFor(t, "the existing Secret is adopted", secretOwnedBy(g, owner))
	after, err := g.stored(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !after.signer.Equal(before.signer) || !after.serving.Equal(before.serving) {
		t.Error("adopting the Secret changed its CA or serving certificate")
	}

	e := newFixture(t, true)
	issued, err := g.stored(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ext := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: issued.secret.Data[corev1.TLSCertKey], corev1.TLSPrivateKeyKey: issued.secret.Data[corev1.TLSPrivateKeyKey]}}
	if _, err := e.admin.CoreV1().Secrets(e.id).Create(t.Context(), ext, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	opts = e.certOptions()
	opts.ExternalCerts, opts.WebhookConfigName, opts.Owner = true, "", owner
	r := e.startReplica("external", opts, nil)
	waitFor(t, "the issuer's certificate served", func(context.Context) (bool, error) { return r.m.Ready() == nil, nil })
	sec, err := e.admin.CoreV1().Secrets(e.id).Get(t.Context(), secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sec.OwnerReferences) != 0 {
		t.Errorf("ExternalCerts: the issuer's Secret got owners %+v", sec.OwnerReferences)
	}
}

// TestARefusedOwnerLeavesTheCertificatesWorking: when the API server refuses the owner reference (here a
// ValidatingAdmissionPolicy, as OwnerReferencesPermissionEnforcement would without delete on the Secret), the
// manager creates its Secret without it and serves, as without an owner.
func TestARefusedOwnerLeavesTheCertificatesWorking(t *testing.T) {
	f := newFixture(t, false)
	ctx := t.Context()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-owned-secrets-" + f.id},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}}}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "!has(object.metadata.ownerReferences) || size(object.metadata.ownerReferences) == 0",
				Reason: ptr.To(metav1.StatusReasonForbidden), Message: "no owner references here"}},
		},
	}
	vaps := f.admin.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	if _, err := vaps.Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vaps.Delete(context.Background(), policy.Name, metav1.DeleteOptions{}) })
	bindings := f.admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	if _, err := bindings.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": f.id}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bindings.Delete(context.Background(), policy.Name, metav1.DeleteOptions{}) })
	owner := operatorOwner()
	waitFor(t, "the policy refuses owned Secrets", func(ctx context.Context) (bool, error) {
		probe := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "probe", OwnerReferences: []metav1.OwnerReference{*owner}}}
		_, err := f.admin.CoreV1().Secrets(f.id).Create(ctx, probe, metav1.CreateOptions{})
		if err == nil {
			_ = f.admin.CoreV1().Secrets(f.id).Delete(ctx, "probe", metav1.DeleteOptions{})
		}
		return err != nil, nil
	})

	opts := f.certOptions()
	opts.Owner = owner
	r := f.startReplica("a", opts, map[string]webhook.Handler{"/mutate": labeler("mutated")})
	f.installConfig(nil, hook{name: "pods.a.webhook.test", url: r.url("/mutate"), resource: "pods"})
	f.mutatedPod("mutated")
	sec, err := f.admin.CoreV1().Secrets(f.id).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sec.OwnerReferences) != 0 {
		t.Errorf("the Secret is owned despite the policy: %+v", sec.OwnerReferences)
	}
}
