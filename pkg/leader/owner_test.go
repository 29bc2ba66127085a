package leader_test

import (
	"context"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/handlerkit/handlerkit/pkg/leader"
)

// deploymentChain makes a Deployment, a ReplicaSet it controls and the pods it controls in ns, as the controllers
// would (no controller runs in this environment), and returns the Deployment.
func deploymentChain(t *testing.T, ns string, pods ...string) *appsv1.Deployment {
	t.Helper()
	ctx := testContext(t)
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
	for _, name := range pods {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: operatorLabels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
			Spec: template.Spec}
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return dep
}

// ownedBy says whether the Lease in ns carries an owner reference to uid.
func leaseOwnedBy(t *testing.T, ns string, uid types.UID) func() bool {
	return func() bool {
		l, err := env.Clientset().CoordinationV1().Leases(ns).Get(testContext(t), leaseName, metav1.GetOptions{})
		return err == nil && slices.ContainsFunc(l.OwnerReferences, func(r metav1.OwnerReference) bool {
			return r.UID == uid && r.Kind == "Deployment" && r.APIVersion == "apps/v1" && r.BlockOwnerDeletion == nil
		})
	}
}

// TestDeploymentOwnerFollowsThePodsControllers: the owner of a Deployment's pod is that Deployment, named with its
// UID from the ReplicaSet's controller reference; a pod without that chain has none, and that is no error.
func TestDeploymentOwnerFollowsThePodsControllers(t *testing.T) {
	ns := newNamespace(t)
	dep := deploymentChain(t, ns, "op-a")
	createPod(t, ns, "by-hand", operatorLabels)
	ctx := testContext(t)
	owner, err := leader.DeploymentOwner(ctx, env.Clientset(), ns, "op-a")
	if err != nil {
		t.Fatal(err)
	}
	want := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID}
	if owner == nil || *owner != want {
		t.Errorf("owner %+v, want %+v (no controller, no blockOwnerDeletion)", owner, want)
	}
	if owner, err := leader.DeploymentOwner(ctx, env.Clientset(), ns, "by-hand"); owner != nil || err != nil {
		t.Errorf("a pod run by hand: owner %+v, err %v; want none and no error", owner, err)
	}
	if _, err := leader.DeploymentOwner(ctx, env.Clientset(), ns, "missing"); err == nil {
		t.Error("a missing own pod: no error")
	}
}

// TestLeaseIsOwnedByTheOperatorsDeployment: with WithOwner the Lease a replica creates carries the owner
// reference, and an existing ownerless Lease (made by an earlier version) gets it at the next write, so that the
// garbage collector deletes the Lease with the Deployment.
func TestLeaseIsOwnedByTheOperatorsDeployment(t *testing.T) {
	for _, existing := range []bool{false, true} {
		ns := newNamespace(t)
		dep := deploymentChain(t, ns, "op-a")
		if existing {
			// An earlier version's Lease, ownerless, its holder long gone.
			past := metav1.NewMicroTime(time.Now().Add(-time.Hour))
			if _, err := env.Clientset().CoordinationV1().Leases(ns).Create(testContext(t), &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: leaseName},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("op-old"), LeaseDurationSeconds: ptr.To(int32(1)),
					AcquireTime: &past, RenewTime: &past},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		owner, err := leader.DeploymentOwner(testContext(t), env.Clientset(), ns, "op-a")
		if err != nil || owner == nil {
			t.Fatalf("owner %v, %v", owner, err)
		}
		a := startReplica(t, "op-a", newLease(t, ns, "op-a", nil, leader.WithOwner(owner)))
		eventually(t, 30*time.Second, "op-a leads", a.leading)
		eventually(t, 30*time.Second, "the Lease is owned by the Deployment", leaseOwnedBy(t, ns, dep.UID))
		a.cancel()
	}
}

// TestLeaseOwnerRefusedDoesNotStopTheElection: when the API server refuses the owner reference (here a
// ValidatingAdmissionPolicy, as OwnerReferencesPermissionEnforcement would without delete on the Lease), the
// replica leads all the same, with an ownerless Lease, and renews it.
func TestLeaseOwnerRefusedDoesNotStopTheElection(t *testing.T) {
	ns := newNamespace(t)
	ctx := testContext(t)
	kube := env.Clientset()
	dep := deploymentChain(t, ns, "op-a")
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-owned-leases-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"},
						Resources: []string{"leases"}}}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "!has(object.metadata.ownerReferences) || size(object.metadata.ownerReferences) == 0",
				Reason: ptr.To(metav1.StatusReasonForbidden), Message: "no owner references here"}},
		},
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), policy.Name, metav1.DeleteOptions{})
	})
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}},
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	// Until the policy is in force: an owned probe Lease is refused.
	owned := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID}
	eventually(t, 30*time.Second, "the policy refuses owned Leases", func() bool {
		probe := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "probe", OwnerReferences: []metav1.OwnerReference{owned}}}
		_, err := kube.CoordinationV1().Leases(ns).Create(ctx, probe, metav1.CreateOptions{})
		if err == nil {
			_ = kube.CoordinationV1().Leases(ns).Delete(ctx, "probe", metav1.DeleteOptions{})
		}
		return err != nil
	})

	a := startReplica(t, "op-a", newLease(t, ns, "op-a", nil, leader.WithOwner(&owned)))
	eventually(t, 30*time.Second, "op-a leads", a.leading)
	renewTime := func() time.Time {
		l, err := kube.CoordinationV1().Leases(ns).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return time.Time{}
		}
		return l.Spec.RenewTime.Time
	}
	first := renewTime()
	eventually(t, 30*time.Second, "op-a renews the ownerless Lease", func() bool { return renewTime().After(first) })
	select {
	case <-a.leadCtx.Done():
		t.Fatal("op-a lost the lease")
	default:
	}
	if leaseOwnedBy(t, ns, dep.UID)() {
		t.Error("the Lease is owned despite the policy")
	}
}
