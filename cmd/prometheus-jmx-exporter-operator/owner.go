package main

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/pkg/leader"
)

// ownerLookupTimeout bounds ownDeployment: the start never waits longer on it.
const ownerLookupTimeout = 10 * time.Second

// ownDeployment returns an owner reference to the operator's Deployment, found from its own pod (POD_NAMESPACE,
// POD_NAME) through the pod's ReplicaSet (leader.DeploymentOwner: get on pods and replicasets in the operator's
// namespace), for the Lease and the webhook's Secret, which the operator creates at run time: the garbage
// collector then deletes them with the Deployment. Without one (run outside a Deployment or a pod, a lookup that
// fails) it logs once why and returns nil: both are then made ownerless, as before, and nothing else changes.
func ownDeployment(ctx context.Context, cfg *rest.Config, log logrus.FieldLogger) *metav1.OwnerReference {
	ns, pod := leader.DefaultNamespace(), leader.DefaultPodName()
	none := func(why string, err error) *metav1.OwnerReference {
		log.WithError(err).Infof("no owner for the Lease and the webhook's Secret: %s; they stay ownerless, and an uninstall leaves them (docs/install.md, Uninstall)", why)
		return nil
	}
	if ns == "" || pod == "" {
		return none("POD_NAMESPACE or POD_NAME is not set (not run as a pod?)", nil)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return none("no client", err)
	}
	ctx, cancel := context.WithTimeout(ctx, ownerLookupTimeout)
	defer cancel()
	owner, err := leader.DeploymentOwner(ctx, client, ns, pod)
	switch {
	case err != nil:
		return none("the own pod's Deployment could not be read", err)
	case owner == nil:
		return none("the own pod "+ns+"/"+pod+" is not run by a Deployment's ReplicaSet", nil)
	}
	log.WithField("owner", owner.Kind+"/"+owner.Name).Info("the Lease and the webhook's Secret are owned by the operator's Deployment")
	return owner
}
