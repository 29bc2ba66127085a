package operator_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// These tests prove the start-time half of the never-harm promise (issue
// 40): a change goes to one pod at its creation first, and a JVM given the
// agent at start that ends opens the breaker, as after a live load.

// atStartRecordOf is the webhook's record for exporter ex (default config,
// port 9404) under its current generation.
func atStartRecordOf(ex *jmxv1alpha1.PrometheusJmxExporter, canary bool) *atstart.Record {
	rec := atStartRecord(ex.Name)
	rec.Generation, rec.Canary = ex.Generation, canary
	return rec
}

// endContainer plays the kubelet for a JVM that ended ranFor after its
// start, with exit code code, and waits to be started again.
func (c *cluster) endContainer(t *testing.T, ns, name, id string, code int32, ranFor time.Duration) {
	t.Helper()
	for try := 0; ; try++ {
		p, err := c.kube.CoreV1().Pods(ns).Get(c.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		finished := time.Now()
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.5"
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", ContainerID: id, Image: "jvm-app", ImageID: "sha256:1", RestartCount: 1,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error",
				StartedAt: metav1.NewTime(finished.Add(-ranFor)), FinishedAt: metav1.NewTime(finished), ContainerID: id}}}}
		_, err = c.kube.CoreV1().Pods(ns).UpdateStatus(c.ctx, p, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || try > 50 {
			t.Fatal(err)
		}
	}
}

// TestAChangeIsGivenToOnePodAtStartFirst: under mode AtStart, the first pod
// created under a new exporter gets the agent alone: of concurrent
// admissions (the webhook's replicas), exactly one claims the try in the
// exporter's status (status.atStartCanary); pods created while the claim
// holds get no agent and an error that says why (ChangeBeingTried); once
// the canary's JVM has served for the breaker window, the change is proven
// (status.proven) and every pod gets the agent with no claim. Before issue
// 40 every pod got the agent at once.
func TestAChangeIsGivenToOnePodAtStartFirst(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "canary-start")
	var r *operator.Reconciler
	c.runOperatorWith(t, ns, operator.Options{Resync: time.Hour, BreakerWindow: 3 * time.Second, ContainerLogs: servingLogs()}, func(rec *operator.Reconciler) { r = rec })
	labels := map[string]string{"app": "orders"}
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeAtStart, false))
	newPod := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "orders-", Labels: labels}}
	}
	choose := func() (atstart.Input, bool, error) {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		defer cancel()
		return r.AtStartInput(ctx, newPod())
	}

	// Five admissions decided before any claims: each would try the change.
	var inputs []atstart.Input
	waitUntil(t, 30*time.Second, "the exporter chosen", func() (bool, string) {
		_, ok, err := choose()
		return ok && err == nil, fmt.Sprintf("%v %v", ok, err)
	})
	for range 5 {
		in, ok, err := choose()
		if !ok || err != nil || !in.Canary || in.Claim == nil {
			t.Fatalf("an unproven change: %+v %v %v, want a canary input with a claim", in, ok, err)
		}
		inputs = append(inputs, in)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(inputs))
	for i, in := range inputs {
		wg.Go(func() { errs[i] = in.Claim(c.ctx) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !strings.Contains(err.Error(), jmxv1alpha1.ReasonChangeBeingTried):
			t.Errorf("a losing claim: %v, want %s", err, jmxv1alpha1.ReasonChangeBeingTried)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d concurrent claims won (%v), want exactly 1", won, len(errs), errs)
	}
	ex := c.exporter(t, ns, "orders")
	if cl := ex.Status.AtStartCanary; cl == nil || cl.Generation != ex.Generation || cl.ConfigSHA256 != sha256Hex(jmxv1alpha1.DefaultExporterConfig) {
		t.Fatalf("status.atStartCanary = %+v", cl)
	}
	// Another pod while the claim holds: created without the agent.
	waitUntil(t, 30*time.Second, "a pod created while the claim holds refused", func() (bool, string) {
		in, ok, err := choose()
		return !ok && err != nil && strings.Contains(err.Error(), jmxv1alpha1.ReasonChangeBeingTried), fmt.Sprintf("%+v %v %v", in, ok, err)
	})

	// The canary runs, its agent serves: after the window, the change is
	// proven and every pod gets the agent, without a claim.
	c.createPod(t, ns, podSpec{name: "canary", labels: labels, atStart: atStartRecordOf(ex, true), owner: replicaSet("orders-1")}, "containerd://canary1")
	waitUntil(t, time.Minute, "status.proven", func() (bool, string) {
		ex := c.exporter(t, ns, "orders")
		pr := ex.Status.Proven
		return pr != nil && pr.Generation == ex.Generation, fmt.Sprintf("%+v", pr)
	})
	waitUntil(t, 30*time.Second, "a proven change given without a claim", func() (bool, string) {
		in, ok, err := choose()
		return ok && err == nil && !in.Canary && in.Claim == nil, fmt.Sprintf("%+v %v %v", in, ok, err)
	})
}

// TestAJVMThatEndsAfterItsStartWithTheAgentOpensTheBreaker: a JVM given the
// agent at start that ends, not cleanly, within the breaker window (here
// before any agent code could speak: a runtime without java.instrument)
// opens the exporter's circuit breaker with the pod's name; no other pod is
// given the agent; the pod that failed is evicted so that its controller
// recreates it without the agent (an Event says so), and a pod without a
// controller is left, said so. A JVM that exits 0 (it finished its work) or
// on SIGTERM opens nothing. Before issue 40 records made at start were
// skipped by the breaker: every new pod crash-looped while the exporter
// stayed green.
func TestAJVMThatEndsAfterItsStartWithTheAgentOpensTheBreaker(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "breaker-start")
	var r *operator.Reconciler
	c.runOperatorWith(t, ns, operator.Options{Resync: time.Second, BreakerWindow: 30 * time.Second, ContainerLogs: servingLogs()}, func(rec *operator.Reconciler) { r = rec })
	choose := func(labels map[string]string) (atstart.Input, bool, error) {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		defer cancel()
		return r.AtStartInput(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "p-", Labels: labels}})
	}

	// Clean ends and ends on request trip nothing.
	calm := map[string]string{"app": "calm"}
	c.createExporter(t, ns, "calm", calm, withMode(jmxv1alpha1.InjectionModeAtStart, false))
	calmEx := c.exporter(t, ns, "calm")
	c.createPod(t, ns, podSpec{name: "done", labels: calm, atStart: atStartRecordOf(calmEx, true), owner: replicaSet("calm-1")}, "containerd://done1")
	c.endContainer(t, ns, "done", "containerd://done1", 0, time.Second)
	c.createPod(t, ns, podSpec{name: "stopped", labels: calm, atStart: atStartRecordOf(calmEx, false), owner: replicaSet("calm-1")}, "containerd://stopped1")
	c.endContainer(t, ns, "stopped", "containerd://stopped1", 143, time.Second)

	// A JVM that could not start with the agent, in a pod of a ReplicaSet.
	labels := map[string]string{"app": "jlinked"}
	c.createExporter(t, ns, "jlinked", labels, withMode(jmxv1alpha1.InjectionModeAtStart, false))
	ex := c.exporter(t, ns, "jlinked")
	c.createPod(t, ns, podSpec{name: "harmed", labels: labels, atStart: atStartRecordOf(ex, true), owner: replicaSet("jlinked-1")}, "containerd://harmed1")
	c.endContainer(t, ns, "harmed", "containerd://harmed1", 1, 200*time.Millisecond)

	waitUntil(t, time.Minute, "the breaker open on the harmed pod", func() (bool, string) {
		cb := c.exporter(t, ns, "jlinked").Status.CircuitBreaker
		return cb != nil && cb.Pod == "harmed" && cb.Generation == ex.Generation && strings.Contains(cb.Message, "given the agent at start") &&
			strings.Contains(cb.Message, "exit code 1"), fmt.Sprintf("%+v", cb)
	})
	c.waitCondition(t, ns, "jlinked", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonJVMEndedAfterInjection)
	waitUntil(t, 30*time.Second, "no other pod given the agent", func() (bool, string) {
		in, ok, err := choose(labels)
		return !ok && err != nil && strings.Contains(err.Error(), jmxv1alpha1.ReasonJVMEndedAfterInjection), fmt.Sprintf("%+v %v %v", in, ok, err)
	})
	waitUntil(t, time.Minute, "the harmed pod evicted", func() (bool, string) {
		_, err := c.kube.CoreV1().Pods(ns).Get(c.ctx, "harmed", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	waitUntil(t, 30*time.Second, "the replacement's Event", func() (bool, string) {
		return c.hasEvent(t, ns, "PrometheusJmxExporter", "jlinked", jmxv1alpha1.ReasonHarmedPodReplaced, "pod harmed", "ReplicaSet jlinked-1"), "none"
	})

	// The same in a pod without a controller: left, and said so.
	bare := map[string]string{"app": "bare"}
	c.createExporter(t, ns, "bare", bare, withMode(jmxv1alpha1.InjectionModeBoth, false))
	bareEx := c.exporter(t, ns, "bare")
	c.createPod(t, ns, podSpec{name: "lonely", labels: bare, atStart: atStartRecordOf(bareEx, true)}, "containerd://lonely1")
	c.endContainer(t, ns, "lonely", "containerd://lonely1", 134, time.Second)
	waitUntil(t, time.Minute, "the bare pod's Event", func() (bool, string) {
		return c.hasEvent(t, ns, "Pod", "lonely", jmxv1alpha1.ReasonHarmedPodNotReplaced, "no controller"), "none"
	})
	if cb := c.exporter(t, ns, "bare").Status.CircuitBreaker; cb == nil || cb.Pod != "lonely" {
		t.Errorf("bare's breaker %+v, want open on lonely", cb)
	}
	hold(t, 3*time.Second, "the pod without a controller kept", func() (bool, string) {
		_, err := c.kube.CoreV1().Pods(ns).Get(c.ctx, "lonely", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})

	// Still nothing for the calm exporter.
	if cb := c.exporter(t, ns, "calm").Status.CircuitBreaker; cb != nil {
		t.Errorf("a clean exit or a SIGTERM opened the breaker: %+v", cb)
	}
	if in, ok, err := choose(calm); !ok || err != nil {
		t.Errorf("the calm exporter: %+v %v %v, want the agent given", in, ok, err)
	}
}

// TestAnAttachCanaryHoldsPodsBeingCreatedBack: in mode Both, the leader
// tries an unproven change on one running JVM by live attach first; the
// webhook, which cannot see the leader's memory, must not give the same
// change to a pod being created meanwhile (two canaries: two JVMs harmed by
// one change). The leader claims status.atStartCanary for its attach canary
// before the job runs; a pod being created is then refused with
// ChangeBeingTried naming the attached pod. When every running JVM refuses
// attach (a try that ended without a JVM running the change), the claim is
// dropped and the next pod being created tries the change at start. Before
// the claim, the pod being created got a canary input whose claim won while
// pod a's attach was under way.
func TestAnAttachCanaryHoldsPodsBeingCreatedBack(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "canary-both")
	labels := c.jvmPods(t, ns)
	release := make(chan struct{})
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, req inject.Request) (inject.Outcome, error) {
		if cl.pod == "a" {
			<-release
		}
		return refusedBy(jvm.ReasonAttachDisabled, "the JVM was started with -XX:+DisableAttachMechanism"), nil
	})
	var r *operator.Reconciler
	c.runOperatorWith(t, ns, operator.Options{Resync: time.Hour, BreakerWindow: 3 * time.Second, ContainerLogs: servingLogs(),
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}},
		func(rec *operator.Reconciler) { r = rec })
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeBoth, false))
	choose := func() (atstart.Input, bool, error) {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		defer cancel()
		return r.AtStartInput(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "orders-", Labels: labels}})
	}

	waitUntil(t, 30*time.Second, "pod a's attach under way", func() (bool, string) {
		return s.count(func(cl call) bool { return cl.pod == "a" }) == 1, fmt.Sprintf("%+v", s.all())
	})
	ex := c.exporter(t, ns, "orders")
	if cl := ex.Status.AtStartCanary; cl == nil || cl.AttachedPod != "a" || cl.Generation != ex.Generation {
		t.Fatalf("status.atStartCanary = %+v while pod a's attach tries the change, want a claim naming pod a", cl)
	}
	in, ok, err := choose()
	if ok || err == nil || !strings.Contains(err.Error(), jmxv1alpha1.ReasonChangeBeingTried) || !strings.Contains(err.Error(), "(a, by live attach") {
		if ok && in.Claim != nil {
			err = in.Claim(c.ctx)
		}
		t.Fatalf("a pod created while pod a's attach tries the change: %+v %v, claim %v; want it refused with %s naming pod a",
			in, ok, err, jmxv1alpha1.ReasonChangeBeingTried)
	}

	// Every JVM refuses attach: the try ended without a JVM that runs the
	// change, and pods being created may try it at start.
	close(release)
	waitUntil(t, time.Minute, "the claim dropped after every attach was refused", func() (bool, string) {
		ex := c.exporter(t, ns, "orders")
		return ex.Status.AtStartCanary == nil && s.count(func(call) bool { return true }) == 3, fmt.Sprintf("%+v %+v", ex.Status.AtStartCanary, s.all())
	})
	waitUntil(t, 30*time.Second, "a pod being created tries the change at start", func() (bool, string) {
		in, ok, err := choose()
		return ok && err == nil && in.Canary && in.Claim != nil, fmt.Sprintf("%+v %v %v", in, ok, err)
	})
}
