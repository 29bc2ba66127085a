package leader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Lease is a lease-based elector (client-go leaderelection on a coordination.k8s.io Lease). It has the Lead
// method sdk.WithElector expects.
type Lease struct {
	cfg       *config
	client    kubernetes.Interface // election requests, with a timeout below the renew deadline
	podClient kubernetes.Interface // the labeler's watch and patches
	name      string
	identity  string
	status    *masterStatus
}

// NewLease returns a lease elector for the Lease name in the operator's namespace. The namespace is required
// (WithNamespace, POD_NAMESPACE or the service account file). The identity is the pod name, so a restarted
// container of the same pod resumes its unexpired lease; without a pod name it is the host name plus a random
// suffix, and no pod is labelled.
func NewLease(restConfig *rest.Config, name string, opts ...Option) (*Lease, error) {
	if restConfig == nil {
		return nil, errors.New("leader: nil rest config")
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return nil, fmt.Errorf("leader: invalid lease name %q: %v", name, msgs)
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if c.namespace == "" {
		return nil, errors.New("leader: lease mode needs a namespace: set POD_NAMESPACE or use WithNamespace")
	}
	// A renewal request must not outlive the renew deadline, or a hung connection would keep a lost lease alive.
	rc := rest.CopyConfig(restConfig)
	rc.Timeout = max(c.renewDeadline/2, time.Second)
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(rc, "handlerkit-leader-election"))
	if err != nil {
		return nil, fmt.Errorf("leader: build client: %w", err)
	}
	// The labeler watches pods; a client timeout would cut every watch short, so it gets a client without one.
	podClient, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("leader: build client: %w", err)
	}
	identity := c.podName
	if identity == "" {
		host, _ := os.Hostname()
		identity = host + "_" + string(uuid.NewUUID())
		c.labeling = false
	}
	status, err := newMasterStatus(c.registerer, name)
	if err != nil {
		return nil, err
	}
	return &Lease{cfg: c, client: client, podClient: podClient, name: name, identity: identity, status: status}, nil
}

// Identity returns the holder identity this replica writes into the Lease.
func (l *Lease) Identity() string { return l.identity }

// Lead blocks until this replica holds the lease, or ctx ends. The returned context ends when the lease is lost
// (a renewal failed for longer than the renew deadline) or ctx ends; the lease is then released, the leader label
// removed from the own pod as a best effort, and leader_election_master_status goes back to 0. Because a paused
// leader may overlap briefly with its successor, the operator should stop its handlers and exit when the context
// ends while ctx is still alive. Lead may be called again after that.
func (l *Lease) Lead(ctx context.Context) (context.Context, error) {
	c := l.cfg
	log := c.logger.WithFields(logrus.Fields{"lease": l.name, "namespace": c.namespace, "identity": l.identity})
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: l.name, Namespace: c.namespace},
		Client:     l.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: l.identity},
	}
	started := make(chan context.Context, 1)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   c.leaseDuration,
		RenewDeadline:   c.renewDeadline,
		RetryPeriod:     c.retryPeriod,
		ReleaseOnCancel: true,
		Name:            l.name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leading context.Context) { started <- leading },
			OnStoppedLeading: func() {},
			OnNewLeader: func(identity string) {
				if identity != l.identity {
					log.WithField("holder", identity).Info("leader: waiting for leadership; another replica holds the lease")
				}
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("leader: %w", err)
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		le.Run(ctx)
	}()

	var leading context.Context
	select {
	case leading = <-started:
	case <-done:
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errors.New("leader: lease election ended before this replica led")
	}

	log.Info("leader: became the leader")
	l.status.set(true)
	leadCtx, cancelLead := context.WithCancel(leading)
	labelerDone := make(chan struct{})
	if c.labeling {
		go func() {
			defer close(labelerDone)
			newLabeler(l.podClient, c).run(leadCtx)
		}()
	} else {
		close(labelerDone)
	}
	go func() {
		<-done
		cancelLead()
		<-labelerDone
		l.status.set(false)
		if ctx.Err() == nil {
			log.Warn("leader: lost the lease")
		}
		if c.labeling {
			// Best effort with a fresh context: ctx may be the reason leadership ended.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.renewDeadline)
			defer cancel()
			removed, err := removeLabel(rctx, l.podClient, c.namespace, c.podName, "", c.labelKey, c.labelValue)
			switch {
			case err != nil:
				log.WithError(err).Warn("leader: could not remove the leader label from own pod")
			case removed:
				log.Info("leader: removed the leader label from own pod")
			}
		}
	}()
	return leadCtx, nil
}
