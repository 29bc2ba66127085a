package operator_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// TestReconfigurationAttemptsAreBounded: a reload that fails transiently
// (the agent does not listen, the exec breaks) is tried at most MaxAttempts
// times per container start and config, as a load is, across an operator
// restart; then the config is refused with TooManyAttempts, whose message
// names the last cause, in the pod's record, ConfigApplied and an Event, and
// it is not offered again until it changes.
func TestReconfigurationAttemptsAreBounded(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 4*time.Minute)
	ns := c.namespace(t, "reloadbound")
	labels := map[string]string{"app": "orders"}
	c.createJVMPod(t, ns, "jvm", labels, "containerd://j1")
	c.configMap(t, ns, "cfg", "rules:\n- pattern: \".*\"\n")
	s := &scripted{name: string(jmxv1alpha1.InjectionExec)}
	reloads := func() int { return s.count(func(x call) bool { return x.reconfigure }) }
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) {
		switch {
		case !cl.reconfigure:
			return loaded(r, ""), nil
		case strings.Contains(cl.config, "exec-breaks"):
			return inject.Outcome{}, fmt.Errorf("exec jmx-attach: connection reset by peer (reload %d)", reloads())
		case strings.Contains(cl.config, "not-listening"):
			return refusedBy(jvm.ReasonNotListening, fmt.Sprintf("the agent does not listen (reload %d)", reloads())), nil
		}
		return loaded(r, ""), nil
	})
	const maxAttempts = 3
	opts := operator.Options{Resync: time.Second, BreakerWindow: time.Second, MaxAttempts: maxAttempts,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionExec: s}}
	stop := c.runOperator(t, ns, opts)
	c.createExporter(t, ns, "orders", labels, withConfigMap("cfg"), func(ex *jmxv1alpha1.PrometheusJmxExporter) {
		ex.Spec.Injection.Strategy = jmxv1alpha1.InjectionExec
	})
	c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionConfigApplied, metav1.ConditionTrue, jmxv1alpha1.ReasonConfigInUse)
	before := c.record(t, ns, "jvm").ConfigHash
	count := func(want int) func() (bool, string) {
		return func() (bool, string) { n := reloads(); return n == want, fmt.Sprintf("%d reloads, want %d", n, want) }
	}

	// A config whose reload breaks every time: an operator restart after
	// the first attempt does not reset the count (it is in the pod's
	// record).
	c.configMap(t, ns, "cfg", "# exec-breaks\nrules:\n- pattern: \".*\"\n")
	waitUntil(t, time.Minute, "the first reload", func() (bool, string) {
		r := c.record(t, ns, "jvm")
		return r.Reloads != nil && r.Reloads.Attempts == 1, fmt.Sprintf("%d reloads, record %+v", reloads(), r)
	})
	stop()
	stop = c.runOperator(t, ns, opts)
	defer stop()
	cond := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionConfigApplied, metav1.ConditionFalse, jmxv1alpha1.ReasonTooManyAttempts)
	for _, w := range []string{"3 attempts", "connection reset by peer (reload 3)", "jvm/app"} {
		if !strings.Contains(cond.Message, w) {
			t.Errorf("ConfigApplied message %q lacks %q", cond.Message, w)
		}
	}
	r := c.record(t, ns, "jvm")
	if r.ConfigHash != before || r.Rejected == nil || r.Rejected.Reason != jmxv1alpha1.ReasonTooManyAttempts || r.Reloads != nil {
		t.Errorf("record %+v: want the old config in force and the new one refused with TooManyAttempts", r)
	}
	waitUntil(t, 30*time.Second, "a TooManyAttempts Event on the pod", func() (bool, string) {
		return c.hasEvent(t, ns, "Pod", "jvm", jmxv1alpha1.ReasonTooManyAttempts, "connection reset by peer (reload 3)"), "none"
	})
	hold(t, 8*time.Second, "no reload past the bound over resyncs", count(maxAttempts))

	// Another config, whose agent does not listen: the bound counts again
	// from one, and names the agent's cause.
	c.configMap(t, ns, "cfg", "# not-listening\nrules:\n- pattern: \".*\"\n")
	waitUntil(t, time.Minute, "the second config refused with TooManyAttempts", func() (bool, string) {
		r := c.record(t, ns, "jvm")
		return r.Rejected != nil && r.Rejected.Reason == jmxv1alpha1.ReasonTooManyAttempts && strings.Contains(r.Rejected.Message, "the agent does not listen (reload 6)"),
			fmt.Sprintf("%d reloads, record %+v", reloads(), r)
	})
	hold(t, 8*time.Second, "no reload past the bound over resyncs", count(2*maxAttempts))

	// A config that loads is applied, and the refusal is gone.
	c.configMap(t, ns, "cfg", "rules:\n- pattern: \"java.lang.*\"\n")
	c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionConfigApplied, metav1.ConditionTrue, jmxv1alpha1.ReasonConfigInUse)
	if r := c.record(t, ns, "jvm"); r.Rejected != nil || r.Reloads != nil || r.ConfigHash == before {
		t.Errorf("record %+v: want the new config in force", r)
	}
}

// TestTheMemoryOfGonePodsIsEmpty: every kind of key the operator remembers
// of a pod (a container start's retry, its eviction's backoff, the last
// refusal of its eviction, the report of a pod without a controller) is
// forgotten once the pod is gone, while its exporter stays.
func TestTheMemoryOfGonePodsIsEmpty(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "memory")
	labels := map[string]string{"app": "orders"}
	// Pod a refuses a live attach and its eviction is refused (a budget
	// that allows no disruption); pod bare refuses too and has no
	// controller; pod flaky fails transiently.
	c.createPod(t, ns, podSpec{name: "a", labels: labels, owner: replicaSet("orders-1")}, "containerd://a1")
	c.createPod(t, ns, podSpec{name: "bare", labels: labels}, "containerd://b1")
	c.createPod(t, ns, podSpec{name: "flaky", labels: labels, owner: replicaSet("orders-1")}, "containerd://f1")
	// The test plays the disruption controller: the budget's status allows
	// no disruption (an unobserved budget has the API server ask the client
	// to retry in 10 s, which client-go does, ten times).
	pdb := c.noDisruptionBudget(t, ns, labels)
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, CurrentHealthy: 3, DesiredHealthy: 3, ExpectedPods: 3}
	if _, err := c.kube.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(c.ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) {
		if cl.pod == "flaky" {
			return inject.Outcome{}, fmt.Errorf("the API server timed out")
		}
		return refusedBy(jvm.ReasonDynamicLoadingDisabled, "-XX:-EnableDynamicAgentLoading"), nil
	})
	var rec *operator.Reconciler
	c.runOperatorWith(t, ns, operator.Options{Resync: time.Second, BreakerWindow: time.Second, MaxAttempts: 100,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}},
		func(r *operator.Reconciler) { rec = r })
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeBoth, true))
	waitUntil(t, time.Minute, "the eviction of a refused and bare reported", func() (bool, string) {
		return c.hasEvent(t, ns, "Pod", "a", jmxv1alpha1.ReasonEvictionRefused) && c.hasEvent(t, ns, "Pod", "bare", jmxv1alpha1.ReasonEvictionSkipped),
			fmt.Sprintf("no Events yet; Ready: %s", c.condition(t, ns, "orders", jmxv1alpha1.ConditionReady).Message)
	})
	retried, evictions := operator.PodMemory(rec)
	if retried != 2 || evictions != 2 {
		t.Fatalf("memory of %d pods with retries and %d of evictions, want 2 (a's eviction, flaky's start) and 2 (a's refusal, bare's report): the test proves nothing",
			retried, evictions)
	}

	for _, name := range []string{"a", "bare", "flaky"} {
		if err := c.kube.CoreV1().Pods(ns).Delete(c.ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 30*time.Second, "the memory of the gone pods empty", func() (bool, string) {
		retried, evictions := operator.PodMemory(rec)
		return retried == 0 && evictions == 0, fmt.Sprintf("%d pods with retries, %d entries of evictions", retried, evictions)
	})
}

// TestAPodGoneDuringALookIsForgotten: a look that read a pod before it was
// deleted, and reaches restartOnRefusal after the pod watch forgot the pod,
// notes it again; the exporter's next look, which no longer sees it, drops
// it, so that a gone pod never stays in the operator's memory. (Seen in a
// run of the whole package under -race: TestTheMemoryOfGonePodsIsEmpty
// timed out with one entry of evictions left.)
func TestAPodGoneDuringALookIsForgotten(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "goneduring")
	labels := map[string]string{"app": "orders"}
	// Pod bare refuses a live attach and has no controller: restartOnRefusal
	// reports it once, and remembers that it did.
	c.createPod(t, ns, podSpec{name: "bare", labels: labels}, "containerd://b1")
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) {
		return refusedBy(jvm.ReasonDynamicLoadingDisabled, "-XX:-EnableDynamicAgentLoading"), nil
	})
	var rec *operator.Reconciler
	var armed, staleDone atomic.Bool
	var once, nextOnce sync.Once
	pruned := make(chan bool, 1)
	// next is the memory's size when the look after the stale one starts.
	next := make(chan int, 1)
	c.runOperatorWith(t, ns, operator.Options{Resync: time.Second, BreakerWindow: time.Second,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}},
		func(r *operator.Reconciler) {
			rec = r
			operator.SetBeforeGate(r, func(string) {
				if !armed.Load() {
					return
				}
				if staleDone.Load() {
					nextOnce.Do(func() {
						_, evictions := operator.PodMemory(r)
						next <- evictions
					})
					return
				}
				once.Do(func() {
					defer staleDone.Store(true)
					// This look read pod bare: delete it, and wait until
					// the pod watch has forgotten it.
					if err := c.kube.CoreV1().Pods(ns).Delete(c.ctx, "bare", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
						t.Error(err)
					}
					deadline := time.Now().Add(30 * time.Second)
					for time.Now().Before(deadline) {
						if _, evictions := operator.PodMemory(r); evictions == 0 {
							pruned <- true
							return
						}
						time.Sleep(5 * time.Millisecond) // reads a local map
					}
					pruned <- false
				})
			})
		})
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeBoth, true))
	waitUntil(t, time.Minute, "bare reported and remembered", func() (bool, string) {
		_, evictions := operator.PodMemory(rec)
		return c.hasEvent(t, ns, "Pod", "bare", jmxv1alpha1.ReasonEvictionSkipped) && evictions == 1,
			fmt.Sprintf("%d entries of evictions; Ready: %s", evictions, c.condition(t, ns, "orders", jmxv1alpha1.ConditionReady).Message)
	})
	armed.Store(true)
	select {
	case ok := <-pruned:
		if !ok {
			t.Fatal("the pod watch did not forget the deleted pod bare within 30s: the test proves nothing")
		}
	case <-time.After(time.Minute):
		t.Fatal("no look at the exporter within a minute")
	}
	select {
	case n := <-next:
		// Usually 1: the stale look noted bare again. A later event of the
		// pod may have pruned it again meanwhile (0), and then this run
		// proves less; the look that drops it is what the wait below checks.
		if n != 1 {
			t.Logf("%d entries of evictions after the look that read bare before its deletion (1 expected, noted again)", n)
		}
	case <-time.After(time.Minute):
		t.Fatal("no second look at the exporter within a minute")
	}
	waitUntil(t, 30*time.Second, "the memory of the gone pod empty", func() (bool, string) {
		_, evictions := operator.PodMemory(rec)
		return evictions == 0, fmt.Sprintf("%d entries of evictions", evictions)
	})
}
