package leader

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// labeler keeps the leader label on the leader's pod and off every other pod of the operator.
type labeler struct {
	client    kubernetes.Interface
	namespace string
	podName   string
	key       string
	value     string
	selector  labels.Selector // nil: derived from the own pod's labels
	interval  time.Duration
	log       logrus.FieldLogger
}

func newLabeler(client kubernetes.Interface, c *config) *labeler {
	return &labeler{
		client:    client,
		namespace: c.namespace,
		podName:   c.podName,
		key:       c.labelKey,
		value:     c.labelValue,
		selector:  c.selector,
		interval:  c.labelInterval,
		log:       c.logger.WithFields(logrus.Fields{"namespace": c.namespace, "pod": c.podName, "label": c.labelKey + "=" + c.labelValue}),
	}
}

// run labels until ctx ends. A watch on the operator's pods makes it react within a moment; the periodic check
// covers a watch that is re-listing or an API error on the last attempt.
func (l *labeler) run(ctx context.Context) {
	selector := l.selector
	if selector == nil {
		pod, err := l.ownPodUntilFound(ctx)
		if err != nil {
			return
		}
		selector = selectorFor(pod, l.key)
	}
	tweak := func(o *metav1.ListOptions) { o.LabelSelector = selector.String() }
	if selector == nil {
		l.log.Warn("leader: own pod has no labels besides the leader label; only the own pod is labelled, other pods are left alone")
		tweak = func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", l.podName).String()
		}
	}

	factory := informers.NewSharedInformerFactoryWithOptions(l.client, 0,
		informers.WithNamespace(l.namespace), informers.WithTweakListOptions(tweak))
	pods := factory.Core().V1().Pods()
	informer := pods.Informer()
	kick := make(chan struct{}, 1)
	notify := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}); err != nil {
		l.log.WithError(err).Error("leader: cannot watch pods; the leader label is not maintained")
		return
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return
	}

	ticker := time.NewTicker(l.interval)
	defer ticker.Stop()
	for {
		l.reconcile(ctx, pods.Lister())
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-ticker.C:
		}
	}
}

func (l *labeler) ownPodUntilFound(ctx context.Context) (*corev1.Pod, error) {
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		pod, err := l.client.CoreV1().Pods(l.namespace).Get(ctx, l.podName, metav1.GetOptions{})
		if err == nil {
			return pod, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		l.log.WithError(err).Warn("leader: cannot read own pod; retrying")
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (l *labeler) reconcile(ctx context.Context, lister listerscorev1.PodLister) {
	own, err := lister.Pods(l.namespace).Get(l.podName)
	if apierrors.IsNotFound(err) {
		// A custom selector may not match the own pod; read it directly then.
		own, err = l.client.CoreV1().Pods(l.namespace).Get(ctx, l.podName, metav1.GetOptions{})
	}
	switch {
	case err != nil:
		if ctx.Err() == nil {
			l.log.WithError(err).Warn("leader: cannot read own pod")
		}
	case own.Labels[l.key] != l.value:
		if err := l.addOwn(ctx); err != nil && ctx.Err() == nil {
			l.log.WithError(err).Warn("leader: cannot label own pod")
		} else if err == nil {
			l.log.Info("leader: labelled own pod")
		}
	}

	others, err := lister.Pods(l.namespace).List(labels.SelectorFromSet(labels.Set{l.key: l.value}))
	if err != nil {
		return
	}
	for _, p := range others {
		if p.Name == l.podName {
			continue
		}
		removed, err := removeLabel(ctx, l.client, l.namespace, p.Name, p.UID, l.key, l.value)
		switch {
		case removed:
			l.log.WithField("other", p.Name).Info("leader: removed the leader label from another pod of the operator")
		case err != nil && ctx.Err() == nil:
			l.log.WithError(err).WithField("other", p.Name).Warn("leader: cannot remove the leader label from another pod")
		}
	}
}

func (l *labeler) addOwn(ctx context.Context) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{l.key: l.value}}})
	if err != nil {
		return err
	}
	_, err = l.client.CoreV1().Pods(l.namespace).Patch(ctx, l.podName, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// removeLabel removes key from the pod only if it still has the given value and, when uid is set, the pod is
// still that pod; the JSON patch "test" operations make that check and the removal one atomic step.
// It reports whether it removed the label.
func removeLabel(ctx context.Context, client kubernetes.Interface, namespace, name string, uid types.UID, key, value string) (bool, error) {
	path := "/metadata/labels/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
	ops := []map[string]any{}
	if uid != "" {
		ops = append(ops, map[string]any{"op": "test", "path": "/metadata/uid", "value": string(uid)})
	}
	ops = append(ops,
		map[string]any{"op": "test", "path": path, "value": value},
		map[string]any{"op": "remove", "path": path},
	)
	patch, err := json.Marshal(ops)
	if err != nil {
		return false, err
	}
	_, err = client.CoreV1().Pods(namespace).Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
	// NotFound: the pod is gone. Invalid: a "test" failed, so the label was already removed or changed (the cache
	// lagged behind an earlier removal) or the name now belongs to another pod; either way nothing is left to do.
	if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("patch pod %s/%s: %w", namespace, name, err)
	}
	return true, nil
}
