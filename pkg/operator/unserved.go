package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
)

// watchUnserved is the watch of the exporters in the namespaces the operator
// does not serve (Options.ReportUnserved).
const watchUnserved = "unserved-exporters"

// servedNamespaces splits Options.Namespaces ("" is every namespace: nil).
func servedNamespaces(list string) []string {
	var out []string
	for _, ns := range strings.Split(list, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			out = append(out, ns)
		}
	}
	return out
}

// unservedSelector is the field selector of the exporters outside served.
// The API server filters them, so the watch's cache holds only those.
func unservedSelector(served []string) string {
	parts := make([]string, len(served))
	for i, ns := range served {
		parts[i] = "metadata.namespace!=" + ns
	}
	return strings.Join(parts, ",")
}

// unserved reports on the exporters in namespaces the operator does not
// serve: it sets NotServed=True and Ready=False, naming the served
// namespaces, once per generation (whichever operator writes it first, when
// several namespaced operators report), and does nothing else. An exporter that
// carries Finalizer is left alone: another operator serves its namespace. It never touches
// their pods and adds no finalizer; its only write is the status (update on
// prometheusjmxexporters/status, cluster-wide).
type unserved struct {
	served []string
}

// message is the NotServed condition's message.
func (u *unserved) message(ns string) string {
	return fmt.Sprintf("namespace %s is not served: this operator serves only %s (its --namespaces); nothing is injected here. "+
		"Ask the cluster admin to add %s to the served namespaces (with their RBAC), or to install an operator that serves it",
		ns, strings.Join(u.served, ", "), ns)
}

// Handle implements sdk.Handler for watchUnserved.
func (u *unserved) Handle(ctx context.Context, e sdk.Event) error {
	ex, ok := e.Object.(*jmxv1alpha1.PrometheusJmxExporter)
	if !ok || e.Deleted || ex.DeletionTimestamp != nil {
		return nil
	}
	// An exporter with the operator's finalizer is served by another
	// operator (two namespaced installs in one cluster): that one writes
	// its status, and both writing would fight.
	if slices.Contains(ex.Finalizers, Finalizer) {
		return nil
	}
	// Once per generation, by whichever operator wrote it: two namespaced
	// operators that both report would otherwise rewrite each other's
	// message (each names its own namespaces) forever.
	if c := findCondition(ex.Status.Conditions, jmxv1alpha1.ConditionNotServed); c != nil && c.Status == metav1.ConditionTrue &&
		c.ObservedGeneration == ex.Generation && ex.Status.ObservedGeneration == ex.Generation {
		return nil
	}
	msg := u.message(ex.Namespace)
	// What the status says of pods and conditions is replaced: what an
	// operator wrote there when it still served the namespace (endpoints,
	// counts, other conditions) is no longer kept up to date by anyone. The
	// state an operator keeps in the status to act safely (the proven
	// change, the circuit breaker, a refused config, a claim at start,
	// restartOnRefusal's state) stays: an exporter not yet taken by its
	// operator may already hold a webhook's claim, and the operator that
	// serves the namespace later needs all of it.
	now := metav1.Now()
	cond := func(typ string, status metav1.ConditionStatus) metav1.Condition {
		c := metav1.Condition{Type: typ, Status: status, ObservedGeneration: ex.Generation,
			Reason: jmxv1alpha1.ReasonNotServed, Message: msg, LastTransitionTime: now}
		if old := findCondition(ex.Status.Conditions, typ); old != nil && old.Status == status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		return c
	}
	ex = ex.DeepCopy()
	old := ex.Status
	ex.Status = jmxv1alpha1.PrometheusJmxExporterStatus{
		CircuitBreaker:     old.CircuitBreaker,
		RejectedConfig:     old.RejectedConfig,
		Proven:             old.Proven,
		AtStartCanary:      old.AtStartCanary,
		RestartOnRefusal:   old.RestartOnRefusal,
		ObservedGeneration: ex.Generation,
		Conditions: []metav1.Condition{
			cond(jmxv1alpha1.ConditionReady, metav1.ConditionFalse),
			cond(jmxv1alpha1.ConditionNotServed, metav1.ConditionTrue),
		},
	}
	if err := action.UpdateStatus(ctx, ex); err != nil {
		if apierrors.IsConflict(err) {
			return sdk.RequeueAfter(0)
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("update status of unserved exporter: %w", err)
	}
	sdk.LoggerFrom(ctx).Infof("operator: %s/%s: NotServed: %s", ex.Namespace, ex.Name, msg)
	return nil
}
