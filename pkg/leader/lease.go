package leader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Lease is a lease-based elector (client-go leaderelection on a coordination.k8s.io Lease). It implements
// sdk.Elector: Lead, Release and Healthy.
type Lease struct {
	cfg       *config
	client    kubernetes.Interface // election requests, with a timeout below the renew deadline
	podClient kubernetes.Interface // the labeler's watch and patches
	name      string
	identity  string
	status    *masterStatus

	mu   sync.Mutex
	term *leaseTerm // the current term; nil when not leading
}

// leaseTerm is one period of leadership, from Lead to Release or loss.
type leaseTerm struct {
	elector  *leaderelection.LeaderElector
	lock     *resourcelock.LeaseLock
	stop     context.CancelFunc // ends the election: no more renewals
	released atomic.Bool        // Release ended the term, rather than a failed renewal
	done     chan struct{}      // closed when the election, the labeler and the clean-up have finished
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

// Lead blocks until this replica holds the lease, or ctx ends; ctx bounds only the wait. From then on the lease is
// renewed until Release is called, or until a renewal fails for longer than the renew deadline: the returned
// context ends then. While it lasts, leader_election_master_status is 1 and the leader label is kept on the own
// pod; when the lease is lost, the label is removed as a best effort. Every Lead must be followed by Release, which
// stops the renewals and releases the lease. Lead may be called again after that.
//
// Because a paused leader may overlap briefly with its successor once its lease has expired, an operator whose
// returned context ends while it still wants to lead should stop its handlers and exit.
func (l *Lease) Lead(ctx context.Context) (context.Context, error) {
	l.mu.Lock()
	busy := l.term != nil
	l.mu.Unlock()
	if busy {
		return nil, errors.New("leader: Lead called again before Release")
	}
	c := l.cfg
	log := c.logger.WithFields(logrus.Fields{"lease": l.name, "namespace": c.namespace, "identity": l.identity})
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: l.name, Namespace: c.namespace},
		Client:     leasesFor(l.client.CoordinationV1(), c),
		LockConfig: resourcelock.ResourceLockConfig{Identity: l.identity},
	}
	started := make(chan context.Context, 1)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: c.leaseDuration,
		RenewDeadline: c.renewDeadline,
		RetryPeriod:   c.retryPeriod,
		// Release gives the lease up, after the operator's handlers have stopped; the end of ctx must not.
		ReleaseOnCancel: false,
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

	// The election outlives ctx once it has led; while it waits, ctx ends it.
	electionCtx, stopElection := context.WithCancel(context.WithoutCancel(ctx))
	stopWaiting := context.AfterFunc(ctx, stopElection)
	elected := make(chan struct{})
	go func() {
		defer close(elected)
		le.Run(electionCtx)
	}()

	var leading context.Context
	select {
	case leading = <-started:
	case <-elected:
		stopWaiting()
		stopElection()
		select {
		case <-started:
			// Acquired just as ctx ended: give the lease back rather than let it expire.
			rctx, cancel := context.WithTimeout(context.Background(), c.renewDeadline)
			defer cancel()
			if err := l.releaseLease(rctx, lock); err != nil {
				log.WithError(err).Warn("leader: could not release a lease acquired as the wait ended")
			}
		default:
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errors.New("leader: lease election ended before this replica led")
	}
	stopWaiting()

	log.Info("leader: became the leader")
	l.status.set(true)
	t := &leaseTerm{elector: le, lock: lock, stop: stopElection, done: make(chan struct{})}
	l.mu.Lock()
	l.term = t
	l.mu.Unlock()
	labelerDone := make(chan struct{})
	if c.labeling {
		go func() {
			defer close(labelerDone)
			newLabeler(l.podClient, c).run(leading)
		}()
	} else {
		close(labelerDone)
	}
	// client-go ends leading when the lease is lost or the election stops;
	// the handlers get a context of their own that ends only once the
	// status says 0, so that whoever sees them stopped never reads 1.
	handlers, endHandlers := context.WithCancel(context.WithoutCancel(leading))
	context.AfterFunc(leading, func() {
		l.status.set(false)
		endHandlers()
	})
	go func() {
		defer close(t.done)
		<-elected
		<-labelerDone
		<-handlers.Done()
		l.status.set(false)
		if !t.released.Load() {
			log.Warn("leader: lost the lease")
		}
		l.removeOwnLabel(log)
	}()
	return handlers, nil
}

// Release stops renewing the lease and, once the election has stopped, gives the lease up so that a stand-by can
// take over at its next retry instead of waiting for the lease to expire. Nothing is written when another replica
// holds the lease by then. It returns when every goroutine of the term has finished; without a term it does
// nothing. ctx bounds the wait and the requests.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	t := l.term
	l.term = nil
	l.mu.Unlock()
	if t == nil {
		return nil
	}
	t.released.Store(true)
	t.stop()
	select {
	case <-t.done:
	case <-ctx.Done():
		return fmt.Errorf("leader: release lease %s/%s: the election did not stop: %w", l.cfg.namespace, l.name, ctx.Err())
	}
	return l.releaseLease(ctx, t.lock)
}

// releaseLease clears the holder of the lease if it is still this replica, as client-go does with ReleaseOnCancel.
// The update carries the resource version just read, so it cannot overwrite a successor's record.
func (l *Lease) releaseLease(ctx context.Context, lock *resourcelock.LeaseLock) error {
	record, _, err := lock.Get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("leader: release lease %s/%s: %w", l.cfg.namespace, l.name, err)
	case record.HolderIdentity != l.identity:
		return nil
	}
	now := metav1.Now()
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions:    record.LeaderTransitions,
		LeaseDurationSeconds: 1,
		AcquireTime:          now,
		RenewTime:            now,
	}); err != nil {
		return fmt.Errorf("leader: release lease %s/%s: %w", l.cfg.namespace, l.name, err)
	}
	l.cfg.logger.WithFields(logrus.Fields{"lease": l.name, "namespace": l.cfg.namespace}).Info("leader: released the lease")
	return nil
}

// Healthy reports an error when this replica believes it leads but has not renewed its lease for longer than the
// lease duration past its expiry: its renewals are stuck and a stand-by may already lead. It is nil otherwise,
// including while standing by.
func (l *Lease) Healthy() error {
	l.mu.Lock()
	t := l.term
	l.mu.Unlock()
	if t == nil {
		return nil
	}
	if err := t.elector.Check(l.cfg.leaseDuration); err != nil {
		return fmt.Errorf("leader: lease %s/%s: %w", l.cfg.namespace, l.name, err)
	}
	return nil
}

// removeOwnLabel removes the leader label from the own pod, as a best effort with a fresh deadline.
func (l *Lease) removeOwnLabel(log logrus.FieldLogger) {
	c := l.cfg
	if !c.labeling {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.renewDeadline)
	defer cancel()
	removed, err := removeLabel(ctx, l.podClient, c.namespace, c.podName, "", c.labelKey, c.labelValue)
	switch {
	case err != nil:
		log.WithError(err).Warn("leader: could not remove the leader label from own pod")
	case removed:
		log.Info("leader: removed the leader label from own pod")
	}
}
