package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// These tests prove issue 28's fair work and late JVMs against the real API
// server (no node): the test plays the kubelet, and where the pool's slots
// matter the operator runs the real EphemeralContainer strategy, whose
// ephemeral containers the test ends (or leaves running) with jmx-attach's
// real result format.

// ephemeralAnswer says how the fake kubelet ends one ephemeral container:
// its state (nil: it is left running, like a jmx-attach still waiting for
// a JVM).
type ephemeralAnswer func(ec corev1.EphemeralContainer) *corev1.ContainerStateTerminated

// jvmLoaded is jmx-attach's answer for one JVM given the agent on 9404.
func jvmLoaded(corev1.EphemeralContainer) *corev1.ContainerStateTerminated {
	msg := jvm.FormatTerminationLog([]jvm.InjectResult{{PID: 41, NSPID: 1, MainClass: "app.Main", Status: jvm.OutcomeOK, Port: 9404}})
	return &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: string(msg)}
}

// noJVM is jmx-attach's answer when no JVM appeared within --wait: exit 3,
// nothing in the termination log.
func noJVM(corev1.EphemeralContainer) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error"}
}

// playKubeletFor plays the kubelet for pod's ephemeral containers until ctx
// ends: each new one runs, then ends as answer() says.
func playKubeletFor(ctx context.Context, kube kubernetes.Interface, ns, pod string, answer func() ephemeralAnswer) {
	for ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond) // this fake kubelet's poll interval
		p, err := kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			continue
		}
		have := map[string]bool{}
		for _, st := range p.Status.EphemeralContainerStatuses {
			have[st.Name] = st.State.Terminated != nil
		}
		changed := false
		for _, ec := range p.Spec.EphemeralContainers {
			if have[ec.Name] {
				continue
			}
			term := answer()(ec)
			if _, seen := have[ec.Name]; seen && term == nil {
				continue // still running
			}
			changed = endEphemeral(p, ec, term) || changed
		}
		if changed {
			_, _ = kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		}
	}
}

// endEphemeral sets the status of ec in p: terminated as term says, or
// running when term is nil. It says whether the status changed: one that
// has terminated stays as it is.
func endEphemeral(p *corev1.Pod, ec corev1.EphemeralContainer, term *corev1.ContainerStateTerminated) bool {
	st := corev1.ContainerStatus{Name: ec.Name, Image: ec.Image, ImageID: "sha256:2", ContainerID: "containerd://" + ec.Name,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}
	if term != nil {
		term.ContainerID = st.ContainerID
		st.State = corev1.ContainerState{Terminated: term}
	}
	for i, old := range p.Status.EphemeralContainerStatuses {
		if old.Name == ec.Name {
			if old.State.Terminated != nil || term == nil && old.State.Running != nil {
				return false
			}
			p.Status.EphemeralContainerStatuses[i] = st
			return true
		}
	}
	p.Status.EphemeralContainerStatuses = append(p.Status.EphemeralContainerStatuses, st)
	return true
}

// kubelet starts playKubeletFor in the background until the test ends.
func (c *cluster) kubelet(t *testing.T, ns, pod string, answer func() ephemeralAnswer) {
	ctx, cancel := context.WithCancel(c.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		playKubeletFor(ctx, c.kube, ns, pod, answer)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func always(a ephemeralAnswer) func() ephemeralAnswer { return func() ephemeralAnswer { return a } }

// ephemeralContainers returns the pod's ephemeral containers and which of
// them have terminated.
func (c *cluster) ephemeralContainers(t *testing.T, ns, pod string) ([]string, map[string]bool) {
	t.Helper()
	p, err := c.kube.CoreV1().Pods(ns).Get(c.ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ec := range p.Spec.EphemeralContainers {
		names = append(names, ec.Name)
	}
	done := map[string]bool{}
	for _, st := range p.Status.EphemeralContainerStatuses {
		done[st.Name] = st.State.Terminated != nil
	}
	return names, done
}

// TestAContainerWaitingForItsJVMHoldsNoSlot: with one slot (--parallelism
// 1), a container whose jmx-attach is still waiting for a JVM (its
// ephemeral container runs on) does not hold the slot: another exporter's
// pod is injected meanwhile. The waiting pod is then deleted: its job ends
// at once, and the operator forgets the pod.
func TestAContainerWaitingForItsJVMHoldsNoSlot(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "noslot")
	c.createJVMPod(t, ns, "sidecar", map[string]string{"app": "sidecar"}, "containerd://s1")
	c.createJVMPod(t, ns, "jvm", map[string]string{"app": "orders"}, "containerd://j1")
	c.kubelet(t, ns, "sidecar", always(func(corev1.EphemeralContainer) *corev1.ContainerStateTerminated { return nil }))
	c.kubelet(t, ns, "jvm", always(jvmLoaded))
	var rec *operator.Reconciler
	c.runOperatorWith(t, ns, operator.Options{Parallelism: 1, Resync: time.Second, BreakerWindow: time.Second,
		InjectionTimeout: 2 * time.Minute, AgentImage: "agent:test"}, func(r *operator.Reconciler) { rec = r })

	c.createExporter(t, ns, "sidecars", map[string]string{"app": "sidecar"})
	waitUntil(t, time.Minute, "jmx-attach running in the sidecar", func() (bool, string) {
		names, done := c.ephemeralContainers(t, ns, "sidecar")
		return len(names) == 1 && !done[names[0]], fmt.Sprint(names, done)
	})
	c.createExporter(t, ns, "orders", map[string]string{"app": "orders"})
	waitUntil(t, 30*time.Second, "the other exporter's pod injected while the sidecar waits", func() (bool, string) {
		r := c.record(t, ns, "jvm")
		return len(r.JVMs) == 1, fmt.Sprintf("%+v", r)
	})
	names, done := c.ephemeralContainers(t, ns, "sidecar")
	if len(names) != 1 || done[names[0]] {
		t.Fatalf("the sidecar's helper no longer waits (%v %v): the test proves nothing", names, done)
	}
	if !operator.PodBusy(rec, podUID(t, c, ns, "sidecar")) {
		t.Fatal("the sidecar's job ended: the test proves nothing")
	}

	// The pod goes mid-wait: the job ends with it, and nothing of the pod is
	// kept in memory.
	uid := podUID(t, c, ns, "sidecar")
	if err := c.kube.CoreV1().Pods(ns).Delete(c.ctx, "sidecar", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the deleted pod's job ended and its state forgotten", func() (bool, string) {
		busy, retried := operator.PodBusy(rec, uid), operator.RetriedPods(rec)
		return !busy && retried == 0, fmt.Sprintf("job running %v, pods with retries %d", busy, retried)
	})
}

func podUID(t *testing.T, c *cluster, ns, name string) string {
	t.Helper()
	p, err := c.kube.CoreV1().Pods(ns).Get(c.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(p.UID)
}

// TestAJVMThatStartsLateIsFoundByALaterLook: a container without a JVM
// after --jvm-wait is recorded as waiting for one (looks, next look), and
// the exporter says WaitingForJVM, not a final NoJVMFound. The schedule is
// kept on the pod: an operator started afresh looks again no earlier than
// the record says, and then finds the JVM that started late.
func TestAJVMThatStartsLateIsFoundByALaterLook(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "late")
	labels := map[string]string{"app": "orders"}
	c.createJVMPod(t, ns, "jvm", labels, "containerd://l1")
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(call, inject.Request) (inject.Outcome, error) { return inject.Outcome{NoJVM: true}, nil })
	opts := operator.Options{Resync: time.Second, BreakerWindow: time.Second, LateJVMInterval: 2 * time.Second,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}}
	stop := c.runOperator(t, ns, opts)
	c.createExporter(t, ns, "orders", labels)

	// Two looks find nothing: the second waits twice as long as the first.
	waitUntil(t, time.Minute, "two looks without a JVM", func() (bool, string) {
		r := c.record(t, ns, "jvm")
		return r.NoJVM && r.Looks == 2, fmt.Sprintf("%+v", r)
	})
	cond := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionFalse, jmxv1alpha1.ReasonWaitingForJVM)
	if !strings.Contains(cond.Message, "waiting for a JVM") || !strings.Contains(cond.Message, "(1 containers)") || !strings.HasSuffix(cond.Message, ": jvm/app") {
		t.Errorf("Ready message %q", cond.Message)
	}
	stop()
	r := c.record(t, ns, "jvm")
	calls := s.all()
	if len(calls) != 2 || r.NextLookAt == nil {
		t.Fatalf("%d looks, record %+v; want 2 and the next look", len(calls), r)
	}
	if gap := calls[1].at.Sub(calls[0].at); gap < 2*time.Second {
		t.Errorf("the second look came %s after the first, before --late-jvm-interval (2s)", gap)
	}
	if ahead := r.NextLookAt.Sub(calls[1].at); ahead < 4*time.Second || ahead > 6*time.Second {
		t.Errorf("the third look is due %s after the second, want 4s (twice the interval)", ahead)
	}

	// The JVM has started meanwhile; a new operator, with no memory of the
	// first, looks at the time the record says and injects it.
	s.setAnswer(func(_ call, r inject.Request) (inject.Outcome, error) { return loaded(r, ""), nil })
	c.runOperator(t, ns, opts)
	waitUntil(t, time.Minute, "the late JVM injected", func() (bool, string) {
		r := c.record(t, ns, "jvm")
		return len(r.JVMs) == 1 && !r.NoJVM && r.NextLookAt == nil, fmt.Sprintf("%+v", r)
	})
	calls = s.all()
	if len(calls) != 3 {
		t.Fatalf("%d looks, want 3", len(calls))
	}
	if calls[2].at.Before(r.NextLookAt.Time) {
		t.Errorf("the restarted operator looked at %s, before the record's next look %s", calls[2].at, r.NextLookAt)
	}
	c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected)
}

// TestLateLooksKeepAnEphemeralContainerForTheNextStart: with the real
// EphemeralContainer strategy, each late look costs one ephemeral
// container of the pod's budget; the looks stop while one is left, the
// record and Ready=False NoJVMFound say so, and the container's next start
// is injected with the one kept.
func TestLateLooksKeepAnEphemeralContainerForTheNextStart(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "keep")
	labels := map[string]string{"app": "orders"}
	c.createJVMPod(t, ns, "jvm", labels, "containerd://k1")
	answer := make(chan ephemeralAnswer, 1)
	answer <- noJVM
	current := func() ephemeralAnswer {
		a := <-answer
		answer <- a
		return a
	}
	c.kubelet(t, ns, "jvm", current)
	const budget = 3
	c.runOperator(t, ns, operator.Options{Resync: time.Second, BreakerWindow: time.Second, LateJVMInterval: time.Second,
		EphemeralContainerBudget: budget, AgentImage: "agent:test"})
	c.createExporter(t, ns, "orders", labels)

	waitUntil(t, time.Minute, "the late looks ended", func() (bool, string) {
		r := c.record(t, ns, "jvm")
		return r.NoJVM && r.LooksEnded != "", fmt.Sprintf("%+v", r)
	})
	r := c.record(t, ns, "jvm")
	if r.Looks != budget-1 || r.NextLookAt != nil || !strings.Contains(r.LooksEnded, "kept for its containers' next starts") {
		t.Errorf("record %+v: want %d looks, no next look, and why", r, budget-1)
	}
	if names, _ := c.ephemeralContainers(t, ns, "jvm"); len(names) != budget-1 {
		t.Errorf("ephemeral containers %v, want %d (one of the budget kept)", names, budget-1)
	}
	c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionFalse, jmxv1alpha1.ReasonNoJVMFound)

	<-answer
	answer <- jvmLoaded
	c.startContainer(t, ns, "jvm", "containerd://k2", &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
		FinishedAt: metav1.NewTime(time.Now().Add(time.Hour))})
	waitUntil(t, time.Minute, "the next start injected with the container kept", func() (bool, string) {
		r := c.record(t, ns, "jvm")
		return r.ContainerID == "containerd://k2" && len(r.JVMs) == 1, fmt.Sprintf("%+v", r)
	})
	if names, _ := c.ephemeralContainers(t, ns, "jvm"); len(names) != budget {
		t.Errorf("ephemeral containers %v, want the budget, %d", names, budget)
	}
}
