package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ForLife is a leader-for-life elector: the replica that creates the lock ConfigMap leads until its pod is gone
// or has stopped for good, or until it releases the lock. It implements sdk.Elector: Lead, Release and Healthy.
type ForLife struct {
	cfg      *config
	client   kubernetes.Interface
	lockName string
	status   *masterStatus

	mu            sync.Mutex
	term          *forLifeTerm // the current term; nil when not leading
	nodeForbidden sync.Once
}

// forLifeTerm is one period of leadership, from Lead to Release.
type forLifeTerm struct {
	lockUID   types.UID          // the lock this term holds; "" when leading outside a cluster
	stop      context.CancelFunc // ends the term's goroutines
	done      chan struct{}      // closed when they have returned
	lost      atomic.Bool        // the lock was deleted or replaced behind this replica's back
	confirmed atomic.Int64       // when the lock was last seen to be ours, in Unix nanoseconds
}

// NewForLife returns a leader-for-life elector whose lock is the ConfigMap lockName in the operator's namespace.
// Without a pod name or a namespace (see WithPodName and WithNamespace) it is not running in a cluster, and Lead
// then skips the election.
func NewForLife(restConfig *rest.Config, lockName string, opts ...Option) (*ForLife, error) {
	if restConfig == nil {
		return nil, errors.New("leader: nil rest config")
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("leader: build client: %w", err)
	}
	return newForLife(client, lockName, opts)
}

func newForLife(client kubernetes.Interface, lockName string, opts []Option) (*ForLife, error) {
	if msgs := validation.IsDNS1123Subdomain(lockName); len(msgs) > 0 {
		return nil, fmt.Errorf("leader: invalid lock name %q: %v", lockName, msgs)
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	status, err := newMasterStatus(c.registerer, lockName)
	if err != nil {
		return nil, err
	}
	return &ForLife{cfg: c, client: client, lockName: lockName, status: status}, nil
}

// Become blocks until this replica leads the lockName election in leader-for-life mode, or ctx ends. It uses the
// in-cluster configuration; outside a cluster (no POD_NAME, or no namespace) it logs that it skips the election
// and returns at once. The leader label is kept on the pod until ctx ends; the lock stays, for life: the garbage
// collector removes it with the pod. Programs that can stop their work before they give the lock up should use
// NewForLife with Lead and Release instead (sdk.Run does).
func Become(ctx context.Context, lockName string, opts ...Option) error {
	c, err := newConfig(opts)
	if err != nil {
		return err
	}
	if c.podName == "" || c.namespace == "" {
		logSkip(c.logger, lockName)
		return nil
	}
	restConfig, err := rest.InClusterConfig()
	if err != nil {
		return fmt.Errorf("leader: in-cluster config: %w", err)
	}
	f, err := NewForLife(restConfig, lockName, opts...)
	if err != nil {
		return err
	}
	if _, err := f.Lead(ctx); err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { f.endTerm() })
	return nil
}

func logSkip(log logrus.FieldLogger, lockName string) {
	log.WithField("lock", lockName).Info("leader: not running in a cluster (POD_NAME or the pod namespace is not set): skipping leader election, this process leads")
}

// Lead blocks until this replica holds the lock, or ctx ends; ctx bounds only the wait. Leadership then lasts
// until Release, or until the lock is deleted or replaced behind this replica's back: the returned context ends
// then, and the replica stops leading rather than let a second leader appear. While it lasts, the leader label is
// kept on the own pod and leader_election_master_status is 1. Every Lead must be followed by Release.
func (f *ForLife) Lead(ctx context.Context) (context.Context, error) {
	f.mu.Lock()
	busy := f.term != nil
	f.mu.Unlock()
	if busy {
		return nil, errors.New("leader: Lead called again before Release")
	}
	c := f.cfg
	if c.podName == "" || c.namespace == "" {
		logSkip(c.logger, f.lockName)
		leadCtx, _ := f.startTerm(ctx, "", nil)
		return leadCtx, nil
	}
	log := c.logger.WithFields(logrus.Fields{"lock": f.lockName, "namespace": c.namespace, "pod": c.podName})
	backoff := c.backoff
	pod, err := f.ownPod(ctx, &backoff, log)
	if err != nil {
		return nil, err
	}
	lastHolder := ""
	for {
		result, h, err := f.tryAcquire(ctx, pod, log)
		if ctx.Err() != nil {
			if result == acquired {
				// Taken just as the wait ended: give it back rather than hold it for life.
				f.deleteLock(context.WithoutCancel(ctx), h.lockUID, log)
			}
			return nil, ctx.Err()
		}
		if err != nil {
			log.WithError(err).Warn("leader: lock attempt failed; retrying")
		}
		if result == acquired {
			leadCtx, _ := f.startTerm(ctx, h.lockUID, log)
			return leadCtx, nil
		}
		if result == retryNow {
			continue
		}
		if h.name != lastHolder {
			log.WithField("holder", h.name).Info("leader: waiting for leadership; another pod holds the lock")
			lastHolder = h.name
		}
		// Wait out the backoff, but look again as soon as the holder's pod changes: that is when it may have
		// failed or gone, and takeover should not wait for the rest of a long backoff step.
		t := time.NewTimer(backoff.Step())
		changed, stopWatch := f.watchHolder(ctx, h)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-changed:
			log.WithField("holder", h.name).Debug("leader: the holder's pod changed; checking the lock again")
		}
		t.Stop()
		stopWatch()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// startTerm records a new term holding the lock lockUID ("" outside a cluster) and starts its goroutines: the
// lock guard and the labeler. The returned context ends when the lock is lost or the term ends.
func (f *ForLife) startTerm(ctx context.Context, lockUID types.UID, log logrus.FieldLogger) (context.Context, *forLifeTerm) {
	termCtx, stopTerm := context.WithCancel(context.WithoutCancel(ctx))
	leadCtx, cancelLead := context.WithCancel(termCtx)
	// The status goes to 0 before the leadership context ends, not after
	// the term's goroutines have returned: whoever sees the handlers'
	// context end (a handler, a test, a scrape after it) never reads 1.
	lose := func() { f.status.set(false); cancelLead() }
	stop := func() { f.status.set(false); stopTerm() }
	t := &forLifeTerm{lockUID: lockUID, stop: stop, done: make(chan struct{})}
	t.confirmed.Store(time.Now().UnixNano())
	f.mu.Lock()
	f.term = t
	f.mu.Unlock()
	f.status.set(true)
	if lockUID == "" {
		go func() {
			defer close(t.done)
			<-leadCtx.Done()
			lose()
			f.status.set(false)
		}()
		return leadCtx, t
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.guardLock(leadCtx, t, lose, log)
	}()
	if f.cfg.labeling {
		wg.Add(1)
		go func() {
			defer wg.Done()
			newLabeler(f.client, f.cfg).run(leadCtx)
		}()
	}
	go func() {
		defer close(t.done)
		wg.Wait()
		f.status.set(false)
	}()
	return leadCtx, t
}

// endTerm stops the current term's goroutines and waits for them; it returns the term, or nil without one. The
// lock is left alone.
func (f *ForLife) endTerm() *forLifeTerm {
	f.mu.Lock()
	t := f.term
	f.term = nil
	f.mu.Unlock()
	if t == nil {
		return nil
	}
	t.stop()
	<-t.done
	return t
}

// Release ends leadership: it stops the labeler and the lock guard, deletes the lock (with a UID precondition, so
// only the lock this term holds), and removes the leader label from the own pod, so that a stand-by takes over at
// once instead of waiting for this pod to go. Without a term it does nothing. ctx bounds the requests.
func (f *ForLife) Release(ctx context.Context) error {
	t := f.endTerm()
	if t == nil || t.lockUID == "" {
		return nil
	}
	c := f.cfg
	log := c.logger.WithFields(logrus.Fields{"lock": f.lockName, "namespace": c.namespace, "pod": c.podName})
	var err error
	if !t.lost.Load() {
		err = f.deleteLock(ctx, t.lockUID, log)
	}
	if c.labeling {
		if _, lerr := removeLabel(ctx, f.client, c.namespace, c.podName, "", c.labelKey, c.labelValue); lerr != nil {
			log.WithError(lerr).Warn("leader: could not remove the leader label from own pod")
		}
	}
	return err
}

// deleteLock deletes the lock if it still has uid.
func (f *ForLife) deleteLock(ctx context.Context, uid types.UID, log logrus.FieldLogger) error {
	err := f.client.CoreV1().ConfigMaps(f.cfg.namespace).Delete(ctx, f.lockName,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case err == nil:
		log.Info("leader: released the lock")
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
	default:
		return fmt.Errorf("leader: release lock %s/%s: %w", f.cfg.namespace, f.lockName, err)
	}
	return nil
}

// Healthy reports an error when this replica leads but has not been able to confirm for longer than the lock
// check tolerance that its lock still exists. It is nil otherwise, including while standing by.
func (f *ForLife) Healthy() error {
	f.mu.Lock()
	t := f.term
	f.mu.Unlock()
	if t == nil || t.lockUID == "" || t.lost.Load() {
		return nil
	}
	since := time.Since(time.Unix(0, t.confirmed.Load()))
	if tolerance := f.lockCheckTolerance(); since > tolerance {
		return fmt.Errorf("leader: lock %s/%s not confirmed for %s (tolerance %s)",
			f.cfg.namespace, f.lockName, since.Round(time.Second), tolerance)
	}
	return nil
}

// lockCheckTolerance is how long a leader may go without confirming its lock before Healthy says so.
func (f *ForLife) lockCheckTolerance() time.Duration {
	return max(time.Minute, 6*f.cfg.labelInterval)
}

// guardLock confirms, every label interval and on every change, that the lock is still the one this term
// acquired. When it is deleted (by hand) or replaced, leadership ends: lose is called, so the operator stops
// handling instead of leading beside the replica that takes the lock next.
func (f *ForLife) guardLock(ctx context.Context, t *forLifeTerm, lose context.CancelFunc, log logrus.FieldLogger) {
	cms := f.client.CoreV1().ConfigMaps(f.cfg.namespace)
	for ctx.Err() == nil {
		cm, err := cms.Get(ctx, f.lockName, metav1.GetOptions{})
		switch {
		case ctx.Err() != nil:
			return
		case apierrors.IsNotFound(err):
			f.loseLock(t, lose, log, "the lock was deleted")
			return
		case err != nil:
			log.WithError(err).Warn("leader: cannot confirm the lock; retrying")
			sleepCtx(ctx, f.cfg.labelInterval)
			continue
		case cm.UID != t.lockUID:
			f.loseLock(t, lose, log, "the lock was replaced by another one")
			return
		}
		t.confirmed.Store(time.Now().UnixNano())
		if why := f.waitLockChange(ctx, cm); why != "" {
			f.loseLock(t, lose, log, why)
			return
		}
	}
}

// waitLockChange watches the lock from the version read, for up to one label interval. It returns why leadership
// is lost when the lock is deleted, and "" otherwise (a change is confirmed by the caller's next read).
func (f *ForLife) waitLockChange(ctx context.Context, cm *corev1.ConfigMap) string {
	wctx, cancel := context.WithTimeout(ctx, f.cfg.labelInterval)
	defer cancel()
	w, err := f.client.CoreV1().ConfigMaps(f.cfg.namespace).Watch(wctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", f.lockName).String(),
		ResourceVersion: cm.ResourceVersion,
	})
	if err != nil {
		sleepCtx(wctx, f.cfg.labelInterval)
		return ""
	}
	defer w.Stop()
	for {
		select {
		case <-wctx.Done():
			return ""
		case ev, ok := <-w.ResultChan():
			if !ok {
				return ""
			}
			if ev.Type == watch.Deleted {
				return "the lock was deleted"
			}
			if ev.Type == watch.Modified || ev.Type == watch.Error {
				return ""
			}
		}
	}
}

// loseLock ends leadership because the lock is no longer this term's.
func (f *ForLife) loseLock(t *forLifeTerm, lose context.CancelFunc, log logrus.FieldLogger, why string) {
	t.lost.Store(true)
	log.WithField("reason", why).Error("leader: lost the lock; stopping leadership so that no second leader acts beside this one")
	lose()
}

// sleepCtx waits for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// ownPod reads this replica's pod, whose UID identifies the leader. A missing pod or missing permission is a
// configuration error and returned at once; anything else is retried with the backoff.
func (f *ForLife) ownPod(ctx context.Context, backoff *wait.Backoff, log logrus.FieldLogger) (*corev1.Pod, error) {
	for {
		pod, err := f.client.CoreV1().Pods(f.cfg.namespace).Get(ctx, f.cfg.podName, metav1.GetOptions{})
		switch {
		case err == nil:
			return pod, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case apierrors.IsNotFound(err), apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
			return nil, fmt.Errorf("leader: get own pod %s/%s: %w", f.cfg.namespace, f.cfg.podName, err)
		}
		log.WithError(err).Warn("leader: cannot read own pod; retrying")
		t := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

type attempt int

const (
	waiting attempt = iota
	acquired
	retryNow
)

// holder is the pod that holds the lock, as last read.
type holder struct {
	name            string
	resourceVersion string    // of the holder's pod; "" when it could not be read
	lockUID         types.UID // the lock's UID, when this replica acquired it
}

// watchHolder returns a channel that is closed when the holder's pod changes after the version read, and a
// function that stops watching. Without a version to start from it never fires; the backoff alone then applies.
func (f *ForLife) watchHolder(ctx context.Context, h holder) (<-chan struct{}, func()) {
	changed := make(chan struct{})
	if h.name == "" || h.resourceVersion == "" {
		return changed, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w, err := f.client.CoreV1().Pods(f.cfg.namespace).Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", h.name).String(),
			ResourceVersion: h.resourceVersion,
		})
		if err != nil {
			return
		}
		defer w.Stop()
		select {
		case _, ok := <-w.ResultChan():
			if ok {
				close(changed)
			}
		case <-ctx.Done():
		}
	}()
	return changed, func() { cancel(); <-done }
}

// tryAcquire makes one attempt: create the lock, recognise it as ours by the pod UID, or remove a stale one.
// It returns the holder when another pod holds the lock.
func (f *ForLife) tryAcquire(ctx context.Context, pod *corev1.Pod, log logrus.FieldLogger) (attempt, holder, error) {
	cms := f.client.CoreV1().ConfigMaps(f.cfg.namespace)
	lock := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name:      f.lockName,
		Namespace: f.cfg.namespace,
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1",
			Kind:       "Pod",
			Name:       pod.Name,
			UID:        pod.UID,
			Controller: new(true),
		}},
	}}
	created, err := cms.Create(ctx, lock, metav1.CreateOptions{})
	if err == nil {
		log.Info("leader: became the leader")
		return acquired, holder{lockUID: created.UID}, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return waiting, holder{}, fmt.Errorf("create lock: %w", err)
	}
	existing, err := cms.Get(ctx, f.lockName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return retryNow, holder{}, nil
	}
	if err != nil {
		return waiting, holder{}, fmt.Errorf("get lock: %w", err)
	}
	owner := podOwner(existing)
	if owner != nil && owner.UID == pod.UID {
		log.Info("leader: continuing as the leader (the lock is owned by this pod's UID)")
		return acquired, holder{lockUID: existing.UID}, nil
	}
	stale, why, rv, err := f.isStale(ctx, owner)
	if err != nil {
		return waiting, holder{name: ownerName(owner)}, err
	}
	if !stale {
		return waiting, holder{name: ownerName(owner), resourceVersion: rv}, nil
	}
	// The UID precondition makes sure that only the lock we judged is removed: if another replica removed it and
	// took a fresh one in the meantime, this delete fails with a conflict instead of removing the new leader's lock.
	err = cms.Delete(ctx, f.lockName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &existing.UID}})
	switch {
	case err == nil:
		log.WithFields(logrus.Fields{"holder": ownerName(owner), "reason": why}).Info("leader: removed a stale lock")
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
	default:
		return waiting, holder{name: ownerName(owner)}, fmt.Errorf("delete stale lock: %w", err)
	}
	return retryNow, holder{}, nil
}

// isStale reports whether the owner can never lead again: gone, replaced by a new pod with the same name, or
// stopped for good. Without a garbage collector (or before it runs) the lock outlives its pod, which is what
// this check covers. It also returns the resource version of the owner pod it read.
func (f *ForLife) isStale(ctx context.Context, owner *metav1.OwnerReference) (stale bool, why, resourceVersion string, err error) {
	if owner == nil {
		return true, "the lock has no pod owner", "", nil
	}
	p, err := f.client.CoreV1().Pods(f.cfg.namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, "owner pod is gone", "", nil
	}
	if err != nil {
		return false, "", "", fmt.Errorf("get owner pod %s: %w", owner.Name, err)
	}
	if p.UID != owner.UID {
		return true, "owner pod was replaced by a new pod of the same name", "", nil
	}
	if stale, why := isStaleOwner(p); stale {
		return true, "owner pod " + why, "", nil
	}
	if p.DeletionTimestamp != nil {
		if lost, why := f.nodeLost(ctx, p.Spec.NodeName); lost {
			return true, "owner pod is stuck terminating: " + why, "", nil
		}
	}
	return false, "", p.ResourceVersion, nil
}

// nodeLost reports whether the node a terminating holder runs on is gone or not Ready, so that the kubelet will
// not finish the pod's deletion: the holder may be stuck Terminating for good. Without permission to read nodes it
// logs so once and reports false: the stand-by then waits for the pod to go.
func (f *ForLife) nodeLost(ctx context.Context, nodeName string) (bool, string) {
	if nodeName == "" {
		return false, ""
	}
	node, err := f.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, "its node " + nodeName + " is gone"
	case apierrors.IsForbidden(err):
		f.nodeForbidden.Do(func() {
			f.cfg.logger.WithError(err).Warn("leader: cannot read nodes (grant get on nodes, see ClusterPolicyRules); " +
				"a holder stuck terminating on a lost node is not taken over until its pod is gone")
		})
		return false, ""
	case err != nil:
		return false, ""
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				return false, ""
			}
			return true, "its node " + nodeName + " is not Ready (" + string(cond.Status) + ")"
		}
	}
	return true, "its node " + nodeName + " reports no Ready condition"
}

func podOwner(cm *corev1.ConfigMap) *metav1.OwnerReference {
	for i := range cm.OwnerReferences {
		r := &cm.OwnerReferences[i]
		if r.Kind == "Pod" && r.APIVersion == "v1" {
			return r
		}
	}
	return nil
}

func ownerName(r *metav1.OwnerReference) string {
	if r == nil {
		return ""
	}
	return r.Name
}
