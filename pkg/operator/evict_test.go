package operator_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// These tests prove that restartOnRefusal cannot empty a workload (issue
// 40): the test plays the kubelet and the ReplicaSet controller (it creates,
// or does not create, the evicted pod's replacement), against a real API
// server.

// refusingPods creates the pods of ReplicaSet orders-1 whose JVMs refuse a
// live attach, runs an operator with restartOnRefusal's ReplacementWait
// wait, and creates exporter orders in mode Both with restartOnRefusal. It
// returns the options, to run the operator again, and what stops it.
func (c *cluster) refusingPods(t *testing.T, ns string, wait time.Duration, names ...string) (operator.Options, func()) {
	t.Helper()
	labels := map[string]string{"app": "orders"}
	for _, name := range names {
		c.createPod(t, ns, podSpec{name: name, labels: labels, owner: replicaSet("orders-1")}, "containerd://"+name+"1")
	}
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) {
		return refusedBy(jvm.ReasonAttachDisabled, "-XX:+DisableAttachMechanism"), nil
	})
	o := operator.Options{Resync: time.Second, BreakerWindow: time.Second, ReplacementWait: wait,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}}
	stop := c.runOperator(t, ns, o)
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeBoth, true))
	return o, stop
}

func (c *cluster) gone(t *testing.T, ns, name string) bool {
	t.Helper()
	_, err := c.kube.CoreV1().Pods(ns).Get(c.ctx, name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// restartState is the exporter's status.restartOnRefusal (zero when unset).
func (c *cluster) restartState(t *testing.T, ns string) jmxv1alpha1.RestartOnRefusalStatus {
	t.Helper()
	if st := c.exporter(t, ns, "orders").Status.RestartOnRefusal; st != nil {
		return *st
	}
	return jmxv1alpha1.RestartOnRefusalStatus{}
}

// noneGone holds for d that none of the pods is evicted.
func (c *cluster) noneGone(t *testing.T, ns string, d time.Duration, what string, names ...string) {
	t.Helper()
	hold(t, d, what, func() (bool, string) {
		for _, n := range names {
			if c.gone(t, ns, n) {
				return false, "pod " + n + " was evicted"
			}
		}
		return true, ""
	})
}

// waitStopped waits until restartOnRefusal stopped with reason, and checks
// that Degraded, status.restartOnRefusal.stopped and a Warning Event say so,
// naming the evicted pod, its controller and words.
func (c *cluster) waitStopped(t *testing.T, ns, reason, evicted string, words ...string) jmxv1alpha1.RestartOnRefusalStop {
	t.Helper()
	deg := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonRestartOnRefusalStopped)
	want := append([]string{"pod " + evicted, "ReplicaSet orders-1", "no more pods are evicted until the exporter's spec changes"}, words...)
	for _, w := range want {
		if !strings.Contains(deg.Message, w) {
			t.Errorf("Degraded message %q lacks %q", deg.Message, w)
		}
	}
	ex := c.exporter(t, ns, "orders")
	st := ex.Status.RestartOnRefusal
	if st == nil || st.Stopped == nil || st.Stopped.Reason != reason || st.Stopped.Pod != evicted || st.Stopped.Generation != ex.Generation || st.Eviction != nil {
		t.Fatalf("status.restartOnRefusal %+v, want stopped (%s, pod %s, generation %d) and no eviction under way", st, reason, evicted, ex.Generation)
	}
	waitUntil(t, 30*time.Second, "the stop's Warning Event", func() (bool, string) {
		return c.hasEvent(t, ns, "PrometheusJmxExporter", "orders", jmxv1alpha1.ReasonRestartOnRefusalStopped, want...), "none"
	})
	return *st.Stopped
}

// TestRestartOnRefusalStopsWhenNoReplacementAppears: the evicted pod's
// controller does not replace it (as when an admission policy refuses pods
// with the agent): past the replacement wait the operator stops, says why
// (Degraded, status, Event), and evicts no other pod, not after an operator
// restart either; a change of the exporter's spec resumes evictions.
func TestRestartOnRefusalStopsWhenNoReplacementAppears(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 4*time.Minute)
	ns := c.namespace(t, "nonew")
	o, stop := c.refusingPods(t, ns, 3*time.Second, "a", "b", "c")
	waitUntil(t, time.Minute, "pod a evicted", func() (bool, string) { return c.gone(t, ns, "a"), "a is there" })
	c.waitStopped(t, ns, jmxv1alpha1.RestartStopReplacementMissing, "a", "no replacement appeared within 3s")
	c.noneGone(t, ns, 5*time.Second, "b and c never evicted", "b", "c")

	// A new operator (a restart, a new leader) reads the stop.
	stop()
	c.runOperator(t, ns, o)
	c.noneGone(t, ns, 6*time.Second, "b and c never evicted after an operator restart", "b", "c")
	if d := c.condition(t, ns, "orders", jmxv1alpha1.ConditionDegraded); d.Reason != jmxv1alpha1.ReasonRestartOnRefusalStopped {
		t.Errorf("Degraded after the restart: %s %s: %s", d.Status, d.Reason, d.Message)
	}

	// A new spec resumes: the next pod is evicted.
	c.updateExporter(t, ns, "orders", func(ex *jmxv1alpha1.PrometheusJmxExporter) { ex.Spec.Port = 9405 })
	waitUntil(t, time.Minute, "pod b evicted once the spec changed", func() (bool, string) { return c.gone(t, ns, "b"), "b is there" })
	if c.gone(t, ns, "c") {
		t.Errorf("pod c was evicted with b")
	}
}

// TestRestartOnRefusalEvictionSurvivesAnOperatorRestart: the eviction under
// way is in the exporter's status, so an operator that starts while the
// evicted pod has no replacement yet evicts nothing more; once the
// replacement runs, is ready and has the agent, it evicts the next pod.
func TestRestartOnRefusalEvictionSurvivesAnOperatorRestart(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 4*time.Minute)
	ns := c.namespace(t, "restarted")
	o, stop := c.refusingPods(t, ns, time.Hour, "a", "b", "c")
	waitUntil(t, time.Minute, "pod a evicted and recorded", func() (bool, string) {
		st := c.restartState(t, ns)
		return c.gone(t, ns, "a") && st.Eviction != nil && st.Eviction.Pod == "a", fmt.Sprintf("status.restartOnRefusal %+v", st)
	})
	ev := c.restartState(t, ns).Eviction
	if ev.Controller.Kind != "ReplicaSet" || ev.Controller.Name != "orders-1" || ev.Controller.UID != "uid-orders-1" || ev.UID == "" || ev.EvictedAt.IsZero() {
		t.Errorf("eviction %+v, want pod a of ReplicaSet orders-1 with its UID and time", ev)
	}

	stop()
	c.runOperator(t, ns, o)
	c.noneGone(t, ns, 6*time.Second, "b and c not evicted by the new operator while a has no replacement", "b", "c")
	waitUntil(t, 30*time.Second, "the new operator's Ready message", func() (bool, string) {
		m := c.condition(t, ns, "orders", jmxv1alpha1.ConditionReady).Message
		return strings.Contains(m, "waiting for its ReplicaSet orders-1 to replace it"), m
	})

	c.createPod(t, ns, podSpec{name: "a-2", labels: map[string]string{"app": "orders"}, owner: replicaSet("orders-1"), atStart: atStartRecord("orders")}, "containerd://a21")
	waitUntil(t, time.Minute, "pod b evicted once a's replacement is ready", func() (bool, string) {
		st := c.restartState(t, ns)
		return c.gone(t, ns, "b") && st.Eviction != nil && st.Eviction.Pod == "b", fmt.Sprintf("status.restartOnRefusal %+v", st)
	})
	c.noneGone(t, ns, 3*time.Second, "c not evicted while b has no replacement", "c")
}

// TestRestartOnRefusalStopsWhenTheReplacementLacksTheAgent: a replacement
// created without the agent at start stops evictions at once, with reason
// ReplacementNotInjected naming it.
func TestRestartOnRefusalStopsWhenTheReplacementLacksTheAgent(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 4*time.Minute)
	ns := c.namespace(t, "noagent")
	_, _ = c.refusingPods(t, ns, time.Hour, "a", "b")
	waitUntil(t, time.Minute, "pod a evicted", func() (bool, string) { return c.gone(t, ns, "a"), "a is there" })
	c.createPod(t, ns, podSpec{name: "a-2", labels: map[string]string{"app": "orders"}, owner: replicaSet("orders-1")}, "containerd://a21")
	stopped := c.waitStopped(t, ns, jmxv1alpha1.RestartStopReplacementNotInjected, "a", "replacement a-2", "without the agent at start")
	if stopped.Replacement != "a-2" {
		t.Errorf("stopped %+v, want replacement a-2", stopped)
	}
	c.noneGone(t, ns, 4*time.Second, "b and a-2 never evicted", "b", "a-2")
}

// TestRestartOnRefusalWaitsForAReplacementThatIsNotReady: a replacement
// with the agent that is not ready holds the next eviction; when it is not
// ready within the replacement wait, the operator stops.
func TestRestartOnRefusalWaitsForAReplacementThatIsNotReady(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 4*time.Minute)
	ns := c.namespace(t, "notready")
	_, _ = c.refusingPods(t, ns, 10*time.Second, "a", "b")
	waitUntil(t, time.Minute, "pod a evicted", func() (bool, string) { return c.gone(t, ns, "a"), "a is there" })
	c.createPod(t, ns, podSpec{name: "a-2", labels: map[string]string{"app": "orders"}, owner: replicaSet("orders-1"),
		atStart: atStartRecord("orders"), notReady: true}, "containerd://a21")
	c.noneGone(t, ns, 3*time.Second, "b not evicted while a's replacement is not ready", "b")
	c.waitStopped(t, ns, jmxv1alpha1.RestartStopReplacementNotReady, "a", "replacement a-2 did not run and become ready within 10s")
	c.noneGone(t, ns, 4*time.Second, "b never evicted", "b")
}

// TestEvictionBackoffGoesWithThePod: a pod whose eviction was refused (a
// PodDisruptionBudget that allows no disruption) and that is then deleted
// leaves nothing in the operator's retry memory.
func TestEvictionBackoffGoesWithThePod(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "backoff")
	labels := map[string]string{"app": "orders"}
	c.createPod(t, ns, podSpec{name: "a", labels: labels, owner: replicaSet("orders-1")}, "containerd://a1")
	pdb, err := c.kube.PolicyV1().PodDisruptionBudgets(ns).Create(c.ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "orders"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr(intstr.FromInt32(0)),
			Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The test plays the disruption controller: no disruption allowed.
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	if _, err := c.kube.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(c.ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) {
		return refusedBy(jvm.ReasonAttachDisabled, "-XX:+DisableAttachMechanism"), nil
	})
	var r *operator.Reconciler
	c.runOperatorWith(t, ns, operator.Options{Resync: time.Second,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}},
		func(rec *operator.Reconciler) { r = rec })
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeBoth, true))
	waitUntil(t, time.Minute, "the eviction refused", func() (bool, string) {
		return c.hasEvent(t, ns, "Pod", "a", jmxv1alpha1.ReasonEvictionRefused), "no EvictionRefused Event"
	})
	if n := operator.RetriedPods(r); n == 0 {
		t.Fatalf("no retry memory of the refused eviction")
	}
	if err := c.kube.CoreV1().Pods(ns).Delete(c.ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the retry memory empty once pod a is gone", func() (bool, string) {
		n := operator.RetriedPods(r)
		return n == 0, fmt.Sprintf("%d pods", n)
	})
}
