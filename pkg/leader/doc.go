// Package leader decides which replica of an operator acts, and marks that replica's pod with a label.
//
// Two modes implement the same one-method shape, Lead(ctx) (context.Context, error), which is what
// sdk.WithElector expects:
//
//   - Leader-for-life (NewForLife, Become): the lock is a ConfigMap owned (controller: true) by the leader's pod.
//     The leader never gives the lock up; a waiting replica takes it over only when the owner pod is gone (or was
//     replaced by a pod with a different UID), or is Failed, Succeeded or Evicted. A waiting replica retries with
//     capped, jittered backoff and looks again at once when the holder's pod changes. No split brain is possible,
//     but takeover waits until the old pod is really gone or failed.
//   - Lease (NewLease): client-go leaderelection on a coordination.k8s.io Lease, with release on cancel. Takeover
//     is fast, but a paused leader can overlap briefly with its successor, so an operator whose lease ends stops
//     its handlers and should exit (sdk.Run returns sdk.ErrLeadershipLost).
//
// While a replica leads, a labeler goroutine keeps the leader label (default leader=true) on its own pod, puts it
// back within seconds if someone removes it, and removes it from every other pod of the same operator. In lease
// mode the leader also removes its own label, as a best effort, when it loses the lease. The metrics Service of
// package metrics can select on that label to scrape only the leader.
//
// Both modes export leader_election_master_status{name} (1 while leading, 0 otherwise) into the registerer given
// with WithRegisterer.
//
// # RBAC
//
// The operator's ServiceAccount needs exactly these rules in its own namespace (a Role is enough; PolicyRules
// returns the same list as Go values, and the package tests run a replica bound to nothing more):
//
//	""                     configmaps       get, create, delete           (leader-for-life lock)
//	coordination.k8s.io    leases           get, create, update           (lease mode)
//	""                     pods             get, list, watch, patch       (own pod's UID, leader label)
//	""                     services         get, create, update           (metrics.EnsureService)
//	monitoring.coreos.com  servicemonitors  get, create, update           (metrics.EnsureService, when the kind exists)
//	apps                   replicasets      get                           (pod -> ReplicaSet -> Deployment owner)
//	apps                   deployments      get
//
// Discovery (used to find the ServiceMonitor kind) is allowed to every authenticated user by the default
// system:discovery ClusterRole. A deployment that uses only one election mode may drop the other mode's rule.
package leader
