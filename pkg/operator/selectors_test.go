package operator_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// TestOwnershipFollowsSelectorChangesAndDeletions: the operator keeps the
// exporters' parsed selectors between looks, and must see every change of
// them. Two exporters select pods a, b and c: the older one owns them and
// the newer one says SelectorConflict; when the older one's selector stops
// matching, the conflict ends; when it matches again, it is back; when the
// older one is deleted, the conflict ends for good.
func TestOwnershipFollowsSelectorChangesAndDeletions(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 4*time.Minute)
	ns := c.namespace(t, "owners")
	labels := c.jvmPods(t, ns)
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) { return loaded(r, ""), nil })
	c.runOperator(t, ns, operator.Options{Resync: time.Minute, BreakerWindow: time.Second,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}})
	c.createExporter(t, ns, "first", labels)
	c.waitCondition(t, ns, "first", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected)
	c.createExporter(t, ns, "second", labels)
	c.waitCondition(t, ns, "second", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonSelectorConflict)

	setSelector := func(sel map[string]string) {
		t.Helper()
		c.updateExporter(t, ns, "first", func(ex *jmxv1alpha1.PrometheusJmxExporter) { ex.Spec.Selector.MatchLabels = sel })
	}
	setSelector(map[string]string{"app": "nothing"})
	c.waitCondition(t, ns, "second", jmxv1alpha1.ConditionDegraded, metav1.ConditionFalse, jmxv1alpha1.ReasonAsExpected)
	c.waitCondition(t, ns, "second", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected)
	setSelector(labels)
	c.waitCondition(t, ns, "second", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonSelectorConflict)
	if err := c.jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Delete(c.ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitCondition(t, ns, "second", jmxv1alpha1.ConditionDegraded, metav1.ConditionFalse, jmxv1alpha1.ReasonAsExpected)
}
