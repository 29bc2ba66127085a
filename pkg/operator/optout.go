package operator

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// The opt-out (issue 41): a pod or a namespace labelled
// atstart.LabelOptOut=atstart.OptOutValue is left alone by every path: no
// attach, no reconfiguration, no eviction (restartOnRefusal, or the harmed
// pod of the at-start breaker), no change to its annotations, and no agent
// at start. Every path asks optedOut.

// namespaceOptOutTTL is how long a namespace's opt-out label, as read from
// the API server, is taken as true: a namespace labelled (or unlabelled)
// is seen within it. namespaceErrorTTL is how long a failed read is
// remembered (the namespace's pods are left alone meanwhile).
const (
	namespaceOptOutTTL = 30 * time.Second
	namespaceErrorTTL  = 5 * time.Second
	// namespaceReadTimeout bounds one read of a namespace.
	namespaceReadTimeout = 5 * time.Second
)

// namespaceOptOuts remembers the namespaces' opt-out labels. mu guards the
// map only: it is never held while the API server is asked, since the
// webhook asks during admissions.
type namespaceOptOuts struct {
	mu     sync.Mutex
	seen   map[string]namespaceOptOut
	pruned time.Time
}

// namespaceOptOut is one namespace's label as read at at, or the error of
// the read.
type namespaceOptOut struct {
	optedOut bool
	err      error
	at       time.Time
}

// optOutKind is who opted a pod out.
type optOutKind int

const (
	notOptedOut optOutKind = iota
	podOptedOut
	namespaceOptedOut
)

// optedOut says why pod is left alone by its owner's choice ("" when it is
// not): its own label, else its namespace's. An error means the namespace
// could not be read: the caller then leaves the pod alone too (fail
// closed) and says why with the error.
func (r *Reconciler) optedOut(ctx context.Context, pod *corev1.Pod) (why string, err error) {
	kind, err := r.optOutOf(ctx, pod)
	switch kind {
	case podOptedOut:
		return fmt.Sprintf("pod %s is labelled %s=%s (its owner opted out)", pod.Name, atstart.LabelOptOut, atstart.OptOutValue), nil
	case namespaceOptedOut:
		return fmt.Sprintf("namespace %s is labelled %s=%s (its owner opted out)", pod.Namespace, atstart.LabelOptOut, atstart.OptOutValue), nil
	}
	return "", err
}

// optOutOf is the one decision of the opt-out: the pod's label, else its
// namespace's (namespaceLabelled).
func (r *Reconciler) optOutOf(ctx context.Context, pod *corev1.Pod) (optOutKind, error) {
	if atstart.OptedOut(pod.Labels) {
		return podOptedOut, nil
	}
	out, err := r.namespaceLabelled(ctx, pod.Namespace)
	switch {
	case err != nil:
		return notOptedOut, err
	case out:
		return namespaceOptedOut, nil
	}
	return notOptedOut, nil
}

// namespaceLabelled says whether namespace ns carries the opt-out label: a
// GET of the Namespace, remembered for namespaceOptOutTTL (a failed one for
// namespaceErrorTTL). Concurrent callers that find nothing remembered each
// ask; none waits for another's call.
func (r *Reconciler) namespaceLabelled(ctx context.Context, ns string) (bool, error) {
	n := &r.namespaces
	now := time.Now()
	n.mu.Lock()
	got, ok := n.seen[ns]
	n.mu.Unlock()
	if ok && (got.err == nil && now.Sub(got.at) < namespaceOptOutTTL || got.err != nil && now.Sub(got.at) < namespaceErrorTTL) {
		return got.optedOut, got.err
	}
	rctx, cancel := context.WithTimeout(ctx, namespaceReadTimeout)
	defer cancel()
	obj, err := r.opts.Client.CoreV1().Namespaces().Get(rctx, ns, metav1.GetOptions{})
	if err != nil {
		err = namespaceError(ns, err)
		if ctx.Err() != nil {
			return false, err // the caller's end, not the namespace's: not remembered
		}
		got = namespaceOptOut{err: err, at: time.Now()}
	} else {
		got = namespaceOptOut{optedOut: atstart.OptedOut(obj.Labels), at: time.Now()}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.seen == nil {
		n.seen = map[string]namespaceOptOut{}
	}
	if got.at.Sub(n.pruned) >= namespaceOptOutTTL {
		for k, v := range n.seen {
			if got.at.Sub(v.at) >= namespaceOptOutTTL {
				delete(n.seen, k)
			}
		}
		n.pruned = got.at
	}
	n.seen[ns] = got
	return got.optedOut, got.err
}

// namespaceError is what the operator says when it cannot read namespace
// ns to honour its opt-out label.
func namespaceError(ns string, err error) error {
	msg := fmt.Sprintf("the operator cannot read namespace %s to honour its opt-out label %s=%s (%v), so it does nothing to the namespace's pods until it can",
		ns, atstart.LabelOptOut, atstart.OptOutValue, err)
	if apierrors.IsForbidden(err) {
		msg += ": grant its ServiceAccount get on namespaces (the ClusterRole prometheus-jmx-exporter-operator-namespaces, deploy/operator/rbac-namespaces.yaml; " +
			"the Helm chart has it)"
	}
	return fmt.Errorf("%s", msg)
}

// optOutPlan is what the plan found of the opt-out: the pods that opted
// out, whether the namespace did, and why the namespace could not be read.
type optOutPlan struct {
	pods       []string
	namespace  bool
	unreadable string
}

// skipOptedOut says whether the plan must leave pod alone because it opted
// out (or its namespace cannot be read), and notes it in the plan: such a
// pod is not matched, gets no job, no record and no eviction, and its
// annotations stay as they are.
func (r *Reconciler) skipOptedOut(ctx context.Context, p *plan, pod *corev1.Pod) bool {
	kind, err := r.optOutOf(ctx, pod)
	switch {
	case err != nil:
		if p.optOut.unreadable == "" {
			p.optOut.unreadable = err.Error()
			sdk.LoggerFrom(ctx).Warnf("operator: %v", err)
		}
		p.retryIn = minPositive(p.retryIn, namespaceErrorTTL)
		return true
	case kind == namespaceOptedOut:
		p.optOut.namespace = true
		// The label's removal wakes nothing: look again once it may be seen.
		p.retryIn = minPositive(p.retryIn, namespaceOptOutTTL)
		return true
	case kind == podOptedOut:
		p.optOut.pods = append(p.optOut.pods, pod.Name)
		return true
	}
	return false
}

// optOutConditions turns Ready and Degraded (computed without the
// opted-out pods) into what the status says of the opt-out.
func optOutConditions(p *plan, ns string, ready, degraded metav1.Condition) (metav1.Condition, metav1.Condition) {
	o := p.optOut
	none := len(p.matched) == 0 && ready.Reason == jmxv1alpha1.ReasonNoPodsMatched
	switch {
	case o.unreadable != "":
		if none {
			ready = condition(jmxv1alpha1.ConditionReady, false, jmxv1alpha1.ReasonNamespaceUnreadable, o.unreadable)
		} else {
			ready.Message += "; " + o.unreadable
		}
		if degraded.Status != metav1.ConditionTrue {
			degraded = condition(jmxv1alpha1.ConditionDegraded, true, jmxv1alpha1.ReasonNamespaceUnreadable, o.unreadable)
		}
	case o.namespace && none:
		ready = condition(jmxv1alpha1.ConditionReady, false, jmxv1alpha1.ReasonNamespaceOptedOut, fmt.Sprintf(
			"namespace %s is labelled %s=%s: the operator attaches to, reconfigures and evicts none of its pods and the webhook injects none at start; "+
				"agents already loaded keep running until their containers restart", ns, atstart.LabelOptOut, atstart.OptOutValue))
	case len(o.pods) > 0:
		sort.Strings(o.pods)
		what := fmt.Sprintf("%d pods labelled %s=%s (their owners opted out) are left alone, their agents (if any) running until their containers restart: %s",
			len(o.pods), atstart.LabelOptOut, atstart.OptOutValue, limitList(o.pods, 10))
		if none {
			ready = condition(jmxv1alpha1.ConditionReady, false, jmxv1alpha1.ReasonOptedOut, "every pod the selector matches opted out: "+what)
		} else {
			ready.Message += "; " + what
		}
	}
	return ready, degraded
}
