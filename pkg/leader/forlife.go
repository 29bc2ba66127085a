package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ForLife is a leader-for-life elector: the replica that creates the lock ConfigMap leads until its pod is gone
// or has stopped for good. It has the Lead method sdk.WithElector expects.
type ForLife struct {
	cfg      *config
	client   kubernetes.Interface
	lockName string
	status   *masterStatus
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
// and returns at once. The leader label is kept on the pod until ctx ends.
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
	_, err = f.Lead(ctx)
	return err
}

func logSkip(log logrus.FieldLogger, lockName string) {
	log.WithField("lock", lockName).Info("leader: not running in a cluster (POD_NAME or the pod namespace is not set): skipping leader election, this process leads")
}

// Lead blocks until this replica holds the lock, or ctx ends. The returned context is ctx itself: leadership is
// for life, so it ends only with ctx. While it lasts, the leader label is kept on the own pod.
func (f *ForLife) Lead(ctx context.Context) (context.Context, error) {
	c := f.cfg
	if c.podName == "" || c.namespace == "" {
		logSkip(c.logger, f.lockName)
		f.status.set(true)
		context.AfterFunc(ctx, func() { f.status.set(false) })
		return ctx, nil
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
			return nil, ctx.Err()
		}
		if err != nil {
			log.WithError(err).Warn("leader: lock attempt failed; retrying")
		}
		if result == acquired {
			break
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

	f.status.set(true)
	context.AfterFunc(ctx, func() { f.status.set(false) })
	if c.labeling {
		go newLabeler(f.client, c).run(ctx)
	}
	return ctx, nil
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
	resourceVersion string // of the holder's pod; "" when it could not be read
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
	_, err := cms.Create(ctx, lock, metav1.CreateOptions{})
	if err == nil {
		log.Info("leader: became the leader")
		return acquired, holder{}, nil
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
		return acquired, holder{}, nil
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
	return false, "", p.ResourceVersion, nil
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
