package leader

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// DeploymentOwner returns an owner reference to the Deployment that runs the pod namespace/podName, found through
// the pod's controller ReplicaSet and that ReplicaSet's controller reference (its name and UID: the Deployment
// itself is not read, so only get on pods and replicasets is needed). It is neither a controller reference nor
// blocks the owner's deletion (blockOwnerDeletion would need update on deployments/finalizers): the garbage
// collector deletes what carries it once that Deployment is gone, whatever deleted it. It returns nil, and no
// error, when the pod has no controller ReplicaSet or that ReplicaSet no controller Deployment (a pod run by hand,
// by another kind of workload) or the ReplicaSet is gone.
func DeploymentOwner(ctx context.Context, client kubernetes.Interface, namespace, podName string) (*metav1.OwnerReference, error) {
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("leader: get own pod %s/%s: %w", namespace, podName, err)
	}
	rsRef := metav1.GetControllerOf(pod)
	if rsRef == nil || rsRef.Kind != "ReplicaSet" || rsRef.APIVersion != "apps/v1" {
		return nil, nil
	}
	rs, err := client.AppsV1().ReplicaSets(namespace).Get(ctx, rsRef.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("leader: get ReplicaSet %s/%s: %w", namespace, rsRef.Name, err)
	}
	if rs.UID != rsRef.UID {
		return nil, nil // replaced since the pod was made: not the pod's owner
	}
	depRef := metav1.GetControllerOf(rs)
	if depRef == nil || depRef.Kind != "Deployment" || depRef.APIVersion != "apps/v1" {
		return nil, nil
	}
	return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: depRef.Name, UID: depRef.UID}, nil
}

// WithOwner makes the Lease of NewLease owned by owner (usually DeploymentOwner's: the operator's Deployment in
// the Lease's namespace), so that the garbage collector deletes the Lease with the operator. The reference is
// set when the Lease is created and added to an existing Lease at its next write (a renewal: every retry period
// while leading), so a Lease an earlier version created without it gets it too. A write the API server refuses
// because of the reference (an admission plugin such as OwnerReferencesPermissionEnforcement, which wants delete
// on the Lease) is made again without it, once logged, and the reference is not tried again: the election never
// waits on it. nil (the default) keeps the Lease ownerless. Leader-for-life needs none: its lock is owned by the
// leader's pod.
func WithOwner(owner *metav1.OwnerReference) Option {
	return func(c *config) error {
		if owner != nil && (owner.Name == "" || owner.UID == "" || owner.Kind == "" || owner.APIVersion == "") {
			return fmt.Errorf("leader: WithOwner %+v: want apiVersion, kind, name and uid", *owner)
		}
		c.owner = owner
		return nil
	}
}

// ownedLeases is a LeasesGetter whose Create and Update put owner into the Lease's owner references.
type ownedLeases struct {
	coordinationv1client.LeasesGetter
	owner   metav1.OwnerReference
	log     logrus.FieldLogger
	refused *atomic.Bool // the API server refused the reference once: no more tries
}

// leasesFor returns the LeasesGetter for a lock: getter itself without an owner.
func leasesFor(getter coordinationv1client.LeasesGetter, c *config) coordinationv1client.LeasesGetter {
	if c.owner == nil {
		return getter
	}
	return &ownedLeases{LeasesGetter: getter, owner: *c.owner, log: c.logger, refused: &c.ownerRefused}
}

func (o *ownedLeases) Leases(namespace string) coordinationv1client.LeaseInterface {
	return &ownedLeaseClient{LeaseInterface: o.LeasesGetter.Leases(namespace), o: o}
}

// ownedLeaseClient is a Leases client whose creates and updates carry the
// owner reference, and are made again without it when the API server
// refuses it.
type ownedLeaseClient struct {
	coordinationv1client.LeaseInterface
	o *ownedLeases
}

// Create creates the Lease owned, or as it is when the owner is refused.
func (c *ownedLeaseClient) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	owned, ok := c.o.withOwner(lease)
	if !ok {
		return c.LeaseInterface.Create(ctx, lease, opts)
	}
	out, err := c.LeaseInterface.Create(ctx, owned, opts)
	if c.o.refusedBy(err, owned) {
		return c.LeaseInterface.Create(ctx, lease, opts)
	}
	return out, err
}

// Update updates the Lease owned, or as it is when the owner is refused.
func (c *ownedLeaseClient) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	owned, ok := c.o.withOwner(lease)
	if !ok {
		return c.LeaseInterface.Update(ctx, lease, opts)
	}
	out, err := c.LeaseInterface.Update(ctx, owned, opts)
	if c.o.refusedBy(err, owned) {
		return c.LeaseInterface.Update(ctx, lease, opts)
	}
	if err == nil {
		c.o.log.WithFields(logrus.Fields{"lease": lease.Name, "namespace": lease.Namespace, "owner": c.o.owner.Kind + "/" + c.o.owner.Name}).
			Info("leader: the Lease is owned by the operator's Deployment now; it goes away with it")
	}
	return out, err
}

// withOwner returns a copy of lease with the owner reference added, and false when it needs none (it has it, or
// the API server refused it before).
func (o *ownedLeases) withOwner(lease *coordinationv1.Lease) (*coordinationv1.Lease, bool) {
	if o.refused.Load() || slices.ContainsFunc(lease.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == o.owner.UID }) {
		return nil, false
	}
	out := lease.DeepCopy()
	out.OwnerReferences = append(out.OwnerReferences, o.owner)
	return out, true
}

// refusedBy says whether err is the API server refusing the owner reference (Forbidden, by an admission plugin,
// or Invalid), and if so logs it once and never tries again.
func (o *ownedLeases) refusedBy(err error, lease *coordinationv1.Lease) bool {
	if err == nil || !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) {
		return false
	}
	if o.refused.CompareAndSwap(false, true) {
		o.log.WithError(err).WithFields(logrus.Fields{"lease": lease.Name, "namespace": lease.Namespace}).
			Warn("leader: the API server refused the Lease's owner reference to the operator's Deployment; the Lease stays ownerless, and an uninstall leaves it (docs/install.md, Uninstall)")
	}
	return true
}
