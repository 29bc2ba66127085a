// Package leader decides which replica of an operator acts, and marks that replica's pod with a label.
//
// Two modes implement sdk.Elector (Lead, Release, Healthy), which sdk.WithElector expects. Leadership is a
// two-phase contract: Lead acquires and returns a context that ends only when leadership is lost; Release, called
// after the operator's handlers have stopped, stops renewing and gives up what Lead acquired. The end of Lead's
// own context bounds only the wait, so that a stand-by never leads while the old leader's handlers still run.
//
//   - Leader-for-life (NewForLife, Become): the lock is a ConfigMap owned (controller: true) by the leader's pod.
//     The leader keeps the lock until Release deletes it; a waiting replica takes it over earlier only when the
//     owner pod is gone (or was replaced by a pod with a different UID), is Failed, Succeeded or Evicted, or is
//     stuck Terminating on a node that is gone or not Ready. A waiting replica retries with capped, jittered
//     backoff and looks again at once when the holder's pod changes. The leader watches its lock: when the lock is
//     deleted or replaced by hand, it stops leading rather than act beside the next leader.
//   - Lease (NewLease): client-go leaderelection on a coordination.k8s.io Lease, released by Release. Takeover
//     is fast, but a paused leader can overlap briefly with its successor once its lease has expired, so an
//     operator whose lease ends stops its handlers and should exit (sdk.Run returns sdk.ErrLeadershipLost).
//
// While a replica leads, a labeler goroutine keeps the leader label (default leader=true) on its own pod, puts it
// back within seconds if someone removes it, and removes it from every other pod of the same operator. In lease
// mode the leader also removes its own label, as a best effort, when it loses the lease. The metrics Service of
// package metrics can select on that label to scrape only the leader.
//
// In lease mode, WithOwner (usually DeploymentOwner's reference to the operator's Deployment) makes the Lease
// owned, so that it goes away with the operator; leader-for-life's lock is owned by the leader's pod.
//
// Both modes export leader_election_master_status{name} (1 while leading, 0 otherwise) into the registerer given
// with WithRegisterer.
//
// # RBAC
//
// The operator's ServiceAccount needs exactly these rules in its own namespace (a Role is enough; PolicyRules
// returns the same list as Go values, and the package tests run a replica bound to nothing more):
//
//	""                     configmaps       get, watch, create, delete    (leader-for-life lock)
//	coordination.k8s.io    leases           get, create, update           (lease mode)
//	""                     pods             get, list, watch, patch       (own pod's UID, leader label)
//	""                     services         get, create, update           (metrics.EnsureService)
//	monitoring.coreos.com  servicemonitors  get, create, update           (metrics.EnsureService, when the kind exists)
//	apps                   replicasets      get                           (pod -> ReplicaSet -> Deployment owner:
//	                                                                       DeploymentOwner, metrics.EnsureService)
//
// Leader-for-life also reads nodes, cluster-wide, to take over from a holder stuck Terminating on a lost node
// (ClusterPolicyRules; a ClusterRole). Without that rule the takeover waits until the holder's pod is gone.
//
//	""                     nodes            get                           (holder stuck Terminating)
//
// Discovery (used to find the ServiceMonitor kind) is allowed to every authenticated user by the default
// system:discovery ClusterRole. A deployment that uses only one election mode may drop the other mode's rule.
package leader
