package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// These tests prove the operator's half of start-time injection (issue 27)
// against a real API server, with the test playing the kubelet and, where a
// pod is "created by the webhook", writing the annotation the webhook's
// mutation writes (atstart.Record) itself: pkg/inject/atstart proves the
// mutation, test/e2e the whole path on a real node.

// podSpec describes a pod for createPod.
type podSpec struct {
	name   string
	labels map[string]string
	// atStart, when set, is the webhook's record on the pod.
	atStart *atstart.Record
	// owner, when set, is the pod's controller.
	owner *metav1.OwnerReference
	// notReady starts its container not ready.
	notReady bool
	// notes, when set, is what the webhook said of the pod it left alone
	// (atstart.AnnotationNotes).
	notes string
}

// createPod creates the pod with one container, app, and plays the kubelet:
// it runs as container start id.
func (c *cluster) createPod(t *testing.T, ns string, s podSpec, id string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: s.name, Labels: s.labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "jvm-app"}}}}
	if s.atStart != nil {
		b, err := json.Marshal(s.atStart)
		if err != nil {
			t.Fatal(err)
		}
		pod.Annotations = map[string]string{atstart.AnnotationInjected: string(b)}
	}
	if s.notes != "" {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[atstart.AnnotationNotes] = s.notes
	}
	if s.owner != nil {
		pod.OwnerReferences = []metav1.OwnerReference{*s.owner}
	}
	created, err := c.kube.CoreV1().Pods(ns).Create(c.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.runContainer(t, ns, s.name, id, !s.notReady)
	return created
}

// runContainer plays the kubelet: the pod's container app runs as
// container start id, ready or not (the container's and the pod's Ready,
// which the eviction API reads).
func (c *cluster) runContainer(t *testing.T, ns, name, id string, ready bool) {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	for try := 0; ; try++ {
		p, err := c.kube.CoreV1().Pods(ns).Get(c.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		started := metav1.Now()
		if len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].ContainerID == id {
			started = p.Status.ContainerStatuses[0].State.Running.StartedAt
		}
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.5"
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", ContainerID: id, Ready: ready, Image: "jvm-app", ImageID: "sha256:1",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}}
		_, err = c.kube.CoreV1().Pods(ns).UpdateStatus(c.ctx, p, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || try > 50 {
			t.Fatal(err)
		}
	}
}

// atStartRecord is what the webhook records for an exporter with the
// default config on port 9404.
func atStartRecord(exporter string) *atstart.Record {
	return &atstart.Record{Exporter: exporter, Containers: []string{"app"}, Port: 9404, Ports: map[string]int32{"app": 9404},
		ConfigHash: atstart.ConfigHash([]byte(jmxv1alpha1.DefaultExporterConfig)), Delivery: atstart.DeliveryImageVolume}
}

func replicaSet(name string) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name, UID: types.UID("uid-" + name),
		Controller: ptr(true), BlockOwnerDeletion: ptr(true)}
}

func ptr[T any](v T) *T { return &v }

func withMode(mode jmxv1alpha1.InjectionMode, restartOnRefusal bool) func(*jmxv1alpha1.PrometheusJmxExporter) {
	return func(ex *jmxv1alpha1.PrometheusJmxExporter) {
		ex.Spec.Injection.Mode, ex.Spec.Injection.RestartOnRefusal = mode, restartOnRefusal
	}
}

func (c *cluster) podRecord(t *testing.T, ns, pod string) (operator.PodRecord, map[string]string) {
	t.Helper()
	p, err := c.kube.CoreV1().Pods(ns).Get(c.ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var rec operator.PodRecord
	if raw := p.Annotations[operator.AnnotationAgents]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &rec); err != nil {
			t.Fatal(err)
		}
	}
	return rec, p.Annotations
}

func endpointOf(ex *jmxv1alpha1.PrometheusJmxExporter, pod string) (jmxv1alpha1.MetricsEndpoint, bool) {
	for _, e := range ex.Status.MetricsEndpoints {
		if e.Pod == pod {
			return e, true
		}
	}
	return jmxv1alpha1.MetricsEndpoint{}, false
}

// TestBothReportsPodsGivenTheAgentAtStartAndAttachesTheOthers: under mode
// Both, a pod the webhook gave the agent at start is an endpoint with
// injectedBy AtStart on the record's port, gets the operator's record and
// scrape annotations (so that the prometheus.io path and the PodMonitor
// cover it), and is never attached to, not even to reconfigure it when the
// config changes: ConfigApplied says that it keeps its config until the pod
// is next created. A pod without the record (created before the exporter)
// is attached as under Attach, and its agent is given the new config.
func TestBothReportsPodsGivenTheAgentAtStartAndAttachesTheOthers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 4*time.Minute)
	ns := c.namespace(t, "both")
	labels := map[string]string{"app": "orders"}
	c.createPod(t, ns, podSpec{name: "started", labels: labels, atStart: atStartRecord("orders")}, "containerd://s1")
	c.createPod(t, ns, podSpec{name: "running", labels: labels}, "containerd://r1")
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) { return loaded(r, ""), nil })
	c.runOperator(t, ns, operator.Options{Resync: time.Second, BreakerWindow: time.Second, ContainerLogs: servingLogs(),
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}})
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeBoth, false))

	ready := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected)
	if !strings.Contains(ready.Message, "2 JVMs in 2 pods") || !strings.Contains(ready.Message, "1 pods given the agent at start") {
		t.Errorf("Ready message %q", ready.Message)
	}
	ex := c.exporter(t, ns, "orders")
	if e, ok := endpointOf(ex, "started"); !ok || e.InjectedBy != jmxv1alpha1.InjectedByAtStart || e.Port != 9404 ||
		e.ContainerID != "containerd://s1" || e.PodIP == "" || e.InjectedAt.IsZero() {
		t.Errorf("the pod given the agent at start: endpoint %+v (found %v), want injectedBy AtStart on 9404", e, ok)
	}
	if e, ok := endpointOf(ex, "running"); !ok || e.InjectedBy != jmxv1alpha1.InjectedByAttach {
		t.Errorf("the running pod: endpoint %+v (found %v), want injectedBy Attach", e, ok)
	}
	waitUntil(t, 30*time.Second, "the operator's record and scrape annotations on the pod given the agent at start", func() (bool, string) {
		rec, ann := c.podRecord(t, ns, "started")
		app := rec.Containers["app"]
		ok := rec.Exporter == "orders" && app.InjectedBy == jmxv1alpha1.InjectedByAtStart && app.ContainerID == "containerd://s1" &&
			len(app.JVMs) == 1 && app.JVMs[0].Port == 9404 && ann[operator.AnnotationPort] == "9404" && ann[operator.AnnotationScrape] == "true" &&
			ann[operator.AnnotationJVMPrefix+"0"] == "app:9404" && ann[operator.AnnotationExporter] == "orders"
		return ok, fmt.Sprintf("record %+v, annotations %v", rec, ann)
	})
	if n := s.count(func(cl call) bool { return cl.pod == "started" }); n != 0 {
		t.Fatalf("the pod given the agent at start was attached to %d times: %+v", n, s.all())
	}

	// A new config: the attached agent is given it; the agent given at
	// start keeps its own until the pod is next created, and is not touched.
	c.configMap(t, ns, "cfg", "rules:\n- pattern: \".*\"\n")
	c.updateExporter(t, ns, "orders", withConfigMap("cfg"))
	cond := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionConfigApplied, metav1.ConditionFalse, jmxv1alpha1.ReasonConfigAtNextStart)
	for _, w := range []string{"1 pods", "started/app", "next created"} {
		if !strings.Contains(cond.Message, w) {
			t.Errorf("ConfigApplied message %q lacks %q", cond.Message, w)
		}
	}
	if n := s.count(func(cl call) bool { return cl.pod == "running" && cl.reconfigure }); n != 1 {
		t.Errorf("the attached pod was reconfigured %d times, want 1: %+v", n, s.all())
	}
	hold(t, 3*time.Second, "the pod given the agent at start never attached to", func() (bool, string) {
		n := s.count(func(cl call) bool { return cl.pod == "started" })
		return n == 0, fmt.Sprintf("%d calls: %+v", n, s.all())
	})
}

// TestAtStartModeNeverAttachesAndReportsPodsWithoutTheAgent: under mode
// AtStart, a running pod created without the agent (before the exporter, or
// while the webhook was down) is reported (Ready=False NotInjectedAtStart,
// naming it and how to fix it; an Event) and never attached, over many
// resyncs; a pod given the agent at start serves. No strategy need be
// enabled for AtStart.
func TestAtStartModeNeverAttachesAndReportsPodsWithoutTheAgent(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "atstart")
	labels := map[string]string{"app": "orders"}
	c.createPod(t, ns, podSpec{name: "old", labels: labels}, "containerd://o1")
	c.createPod(t, ns, podSpec{name: "new", labels: labels, atStart: atStartRecord("orders")}, "containerd://n1")
	c.createPod(t, ns, podSpec{name: "alone", labels: labels, notes: "container app sets JAVA_TOOL_OPTIONS from valueFrom; left alone, not injected"}, "containerd://l1")
	s := &scripted{name: string(jmxv1alpha1.InjectionExec)} // EphemeralContainer is not enabled
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) { return loaded(r, ""), nil })
	c.runOperator(t, ns, operator.Options{Resync: time.Second, ContainerLogs: servingLogs(),
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionExec: s}})
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeAtStart, false))

	c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionFalse, jmxv1alpha1.ReasonNotInjectedAtStart)
	// The pod given the agent at start serves once its agent's line is read.
	waitUntil(t, 30*time.Second, "the endpoint of the pod given the agent at start", func() (bool, string) {
		_, ok := endpointOf(c.exporter(t, ns, "orders"), "new")
		return ok, "none"
	})
	ready := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionFalse, jmxv1alpha1.ReasonNotInjectedAtStart)
	// The pod the webhook left alone is named with what it said.
	for _, w := range []string{"old/app", "never attached", "rollout", "mode Both", "alone/app",
		"the webhook left alone pod alone (container app sets JAVA_TOOL_OPTIONS from valueFrom; left alone, not injected)"} {
		if !strings.Contains(ready.Message, w) {
			t.Errorf("Ready message %q lacks %q", ready.Message, w)
		}
	}
	if strings.Contains(ready.Message, "new/app") {
		t.Errorf("Ready message %q names the pod given the agent at start", ready.Message)
	}
	ex := c.exporter(t, ns, "orders")
	if e, ok := endpointOf(ex, "new"); !ok || e.InjectedBy != jmxv1alpha1.InjectedByAtStart {
		t.Errorf("endpoint of the pod given the agent at start: %+v (found %v)", e, ok)
	}
	if _, ok := endpointOf(ex, "old"); ok || ex.Status.InjectedPods != 1 || ex.Status.MatchedPods != 3 {
		t.Errorf("status %+v, want one injected pod of three and no endpoint of the old one", ex.Status)
	}
	if d := findCond(ex, jmxv1alpha1.ConditionDegraded); d == nil || d.Status != metav1.ConditionFalse {
		t.Errorf("Degraded %+v, want False: the strategy is not needed under AtStart", d)
	}
	waitUntil(t, 30*time.Second, "a NotInjectedAtStart Event", func() (bool, string) {
		return c.hasEvent(t, ns, "PrometheusJmxExporter", "orders", jmxv1alpha1.ReasonNotInjectedAtStart, "old/app"), "none"
	})
	hold(t, 4*time.Second, "nothing attached", func() (bool, string) {
		n := s.count(func(call) bool { return true })
		return n == 0, fmt.Sprintf("%d calls: %+v", n, s.all())
	})
	for _, pod := range []string{"old", "alone"} {
		if rec, _ := c.podRecord(t, ns, pod); rec.Exporter != "" {
			t.Errorf("pod %s, without the agent, got a record %+v", pod, rec)
		}
	}
}

// TestAJVMThatRefusesAttachIsAttachRefusedUnderBoth: under mode Both a JVM
// that refuses a live attach (AttachDisabled, DynamicLoadingDisabled) is
// reported with reason AttachRefused, in the record, the conditions and an
// Event saying that the pod gets the agent when it is next created; under
// Attach the reasons stay what they were.
func TestAJVMThatRefusesAttachIsAttachRefusedUnderBoth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode      jmxv1alpha1.InjectionMode
		reason    jvm.Reason
		own, want string
	}{
		{jmxv1alpha1.InjectionModeBoth, jvm.ReasonAttachDisabled, jmxv1alpha1.ReasonAttachDisabled, jmxv1alpha1.ReasonAttachRefused},
		{jmxv1alpha1.InjectionModeBoth, jvm.ReasonDynamicLoadingDisabled, jmxv1alpha1.ReasonDynamicLoadingDisabled, jmxv1alpha1.ReasonAttachRefused},
		{jmxv1alpha1.InjectionModeAttach, jvm.ReasonAttachDisabled, jmxv1alpha1.ReasonAttachDisabled, jmxv1alpha1.ReasonAttachDisabled},
	} {
		t.Run(string(tc.mode)+"/"+string(tc.reason), func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 3*time.Minute)
			ns := c.namespace(t, "refused")
			labels := map[string]string{"app": "orders"}
			c.createPod(t, ns, podSpec{name: "a", labels: labels, owner: replicaSet("orders-1")}, "containerd://a1")
			s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
			s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) {
				return refusedBy(tc.reason, "the JVM was started with a flag that refuses attach"), nil
			})
			c.runOperator(t, ns, operator.Options{Resync: time.Second,
				Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}})
			c.createExporter(t, ns, "orders", labels, withMode(tc.mode, false))

			wantReady := tc.want
			if tc.want != jmxv1alpha1.ReasonAttachRefused {
				wantReady = jmxv1alpha1.ReasonInjectionFailed
			}
			ready := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionFalse, wantReady)
			c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, wantReady)
			if got := c.record(t, ns, "a"); got.Failure == nil || got.Failure.Reason != tc.want {
				t.Fatalf("record %+v, want a %s failure", got, tc.want)
			}
			words := []string{tc.want}
			if tc.want == jmxv1alpha1.ReasonAttachRefused {
				words = []string{"when it is next created", "rollout", "container restart keeps the pod's spec", tc.own}
				for _, w := range []string{"a/app", "refuse a live attach", "restartOnRefusal: true"} {
					if !strings.Contains(ready.Message, w) {
						t.Errorf("Ready message %q lacks %q", ready.Message, w)
					}
				}
			}
			waitUntil(t, 30*time.Second, "an Event on the pod", func() (bool, string) {
				return c.hasEvent(t, ns, "Pod", "a", tc.want, words...), "none"
			})
			hold(t, 3*time.Second, "one attempt", func() (bool, string) {
				n := s.count(func(call) bool { return true })
				return n == 1, fmt.Sprintf("%d calls", n)
			})
		})
	}
}

// TestRestartOnRefusalEvictsOnePodAtATime: with restartOnRefusal, the pods
// whose JVM refuses a live attach are evicted one at a time: the second
// waits until the first is gone and its replacement runs and is ready; a
// pod without a controller is never evicted (an Event and the Ready message
// say so); and when a replacement comes back without the agent at start
// (the webhook did not inject it), the operator stops evicting rather than
// evict in a loop.
func TestRestartOnRefusalEvictsOnePodAtATime(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 4*time.Minute)
	ns := c.namespace(t, "restart")
	labels := map[string]string{"app": "orders"}
	rs := replicaSet("orders-1")
	for _, name := range []string{"a", "b"} {
		c.createPod(t, ns, podSpec{name: name, labels: labels, owner: rs}, "containerd://"+name+"1")
	}
	c.createPod(t, ns, podSpec{name: "bare", labels: labels}, "containerd://bare1")
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) {
		return refusedBy(jvm.ReasonAttachDisabled, "-XX:+DisableAttachMechanism"), nil
	})
	c.runOperator(t, ns, operator.Options{Resync: time.Second, BreakerWindow: time.Second, ContainerLogs: servingLogs(),
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}})
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeBoth, true))

	gone := func(name string) bool {
		_, err := c.kube.CoreV1().Pods(ns).Get(c.ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	waitUntil(t, time.Minute, "pod a evicted", func() (bool, string) { return gone("a"), "a is there" })
	waitUntil(t, 30*time.Second, "the eviction's Events", func() (bool, string) {
		return c.hasEvent(t, ns, "PrometheusJmxExporter", "orders", jmxv1alpha1.ReasonEvictedOnRefusal, "pod a", "ReplicaSet orders-1") &&
			c.hasEvent(t, ns, "Pod", "a", jmxv1alpha1.ReasonEvictedOnRefusal, "agent at start"), "none"
	})
	waitUntil(t, 30*time.Second, "the bare pod's Event", func() (bool, string) {
		return c.hasEvent(t, ns, "Pod", "bare", jmxv1alpha1.ReasonEvictionSkipped, "no controller"), "none"
	})
	ready := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionFalse, jmxv1alpha1.ReasonAttachRefused)
	waitUntil(t, 30*time.Second, "the Ready message saying what restartOnRefusal waits for", func() (bool, string) {
		ready = *findCond(c.exporter(t, ns, "orders"), jmxv1alpha1.ConditionReady)
		return strings.Contains(ready.Message, "waiting for its ReplicaSet orders-1") && strings.Contains(ready.Message, "bare have no controller"), ready.Message
	})
	// No replacement yet: b waits.
	hold(t, 3*time.Second, "pod b not evicted while a has no replacement", func() (bool, string) { return !gone("b"), "b is gone" })

	// The ReplicaSet's replacement, created by the webhook with the agent,
	// not ready yet: b still waits.
	repl := c.createPod(t, ns, podSpec{name: "a-2", labels: labels, owner: rs, atStart: atStartRecord("orders"), notReady: true}, "containerd://a21")
	hold(t, 3*time.Second, "pod b not evicted while a's replacement is not ready", func() (bool, string) { return !gone("b"), "b is gone" })
	c.runContainer(t, ns, "a-2", "containerd://a21", true)
	waitUntil(t, time.Minute, "pod b evicted once a's replacement is ready", func() (bool, string) { return gone("b"), "b is there" })
	if e, ok := endpointOf(c.exporter(t, ns, "orders"), repl.Name); ok && e.InjectedBy != jmxv1alpha1.InjectedByAtStart {
		t.Errorf("the replacement's endpoint %+v", e)
	}

	// b's replacement comes back without the agent at start: it is
	// attached, refused again, and not evicted: the operator stops.
	c.createPod(t, ns, podSpec{name: "b-2", labels: labels, owner: rs}, "containerd://b21")
	waitUntil(t, time.Minute, "the stop's Event", func() (bool, string) {
		return c.hasEvent(t, ns, "PrometheusJmxExporter", "orders", jmxv1alpha1.ReasonRestartOnRefusalStopped, "b-2", "without the agent at start"), "none"
	})
	waitUntil(t, 30*time.Second, "b-2 refused", func() (bool, string) {
		got := c.record(t, ns, "b-2")
		return got.Failure != nil && got.Failure.Reason == jmxv1alpha1.ReasonAttachRefused, fmt.Sprintf("%+v", got)
	})
	hold(t, 4*time.Second, "b-2 and the bare pod never evicted", func() (bool, string) {
		return !gone("b-2") && !gone("bare"), "evicted"
	})
	ready = *findCond(c.exporter(t, ns, "orders"), jmxv1alpha1.ConditionReady)
	if !strings.Contains(ready.Message, "no more pods are evicted") {
		t.Errorf("Ready message %q does not say that restartOnRefusal stopped", ready.Message)
	}
}

// TestRestartOnRefusalRespectsPodDisruptionBudgets: the eviction goes
// through the eviction API, so a PodDisruptionBudget that allows no
// disruption makes the API server refuse it (429); the operator reports it
// (Event, Ready message) and tries again with backoff, and evicts the pod
// once the budget allows. The test plays the disruption controller, writing
// the budget's status.
func TestRestartOnRefusalRespectsPodDisruptionBudgets(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 4*time.Minute)
	ns := c.namespace(t, "pdb")
	labels := map[string]string{"app": "orders"}
	c.createPod(t, ns, podSpec{name: "a", labels: labels, owner: replicaSet("orders-1")}, "containerd://a1")
	pdb := c.noDisruptionBudget(t, ns, labels)
	budget := func(allowed int32) {
		t.Helper()
		for try := 0; ; try++ {
			p, err := c.kube.PolicyV1().PodDisruptionBudgets(ns).Get(c.ctx, pdb.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: p.Generation, DisruptionsAllowed: allowed,
				CurrentHealthy: 1, DesiredHealthy: 1 - allowed, ExpectedPods: 1}
			_, err = c.kube.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(c.ctx, p, metav1.UpdateOptions{})
			if err == nil {
				return
			}
			if !apierrors.IsConflict(err) || try > 50 {
				t.Fatal(err)
			}
		}
	}
	budget(0)
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) {
		return refusedBy(jvm.ReasonDynamicLoadingDisabled, "-XX:-EnableDynamicAgentLoading"), nil
	})
	c.runOperator(t, ns, operator.Options{Resync: time.Second,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}})
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeBoth, true))

	// Refused, reported, and tried again (the Event's count grows).
	c.waitEvictionRefusedTwice(t, ns, "a")
	// Ready's message is written at the status' pace (operator.StatusDelay).
	waitUntil(t, 2*operator.StatusDelay, "Ready AttachRefused naming the refused eviction", func() (bool, string) {
		ready := *findCond(c.exporter(t, ns, "orders"), jmxv1alpha1.ConditionReady)
		return ready.Reason == jmxv1alpha1.ReasonAttachRefused && strings.Contains(ready.Message, "the eviction of pod a was refused"),
			fmt.Sprintf("Ready %s: %q", ready.Reason, ready.Message)
	})
	if _, err := c.kube.CoreV1().Pods(ns).Get(c.ctx, "a", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod a is gone although its budget allows no disruption: %v", err)
	}
	budget(1)
	waitUntil(t, 90*time.Second, "pod a evicted once its budget allows", func() (bool, string) {
		_, err := c.kube.CoreV1().Pods(ns).Get(c.ctx, "a", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// TestAtStartInputChoosesWhatTheReconcilerWould: the webhook's chooser
// picks the exporter that owns the pod as the reconciler decides it (the
// oldest selecting one), injects only for modes AtStart and Both, takes the
// operator's image, path, pull policy and delivery, and refuses (an error,
// the pod unchanged) an exporter it could not act on: a missing ConfigMap, a
// config an agent refused, an image not allowed.
func TestAtStartInputChoosesWhatTheReconcilerWould(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "chooser")
	var r *operator.Reconciler
	nothing := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)} // no pod is created here
	nothing.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) { return loaded(r, ""), nil })
	c.runOperatorWith(t, ns, operator.Options{Resync: time.Second, AgentImage: "jmx-agent:own", PullPolicy: corev1.PullNever,
		AtStartDelivery: atstart.DeliveryInitContainer, AllowedAgentImages: []string{"jmx-agent:second"},
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: nothing}},
		func(rec *operator.Reconciler) { r = rec })
	pod := func(labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "p-", Labels: labels}}
	}
	choose := func(p *corev1.Pod) (atstart.Input, bool, error) {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		defer cancel()
		return r.AtStartInput(ctx, p)
	}
	// eventually waits until the chooser's answer for p satisfies ok (the
	// caches catch up with the test's writes).
	eventually := func(what string, p *corev1.Pod, ok func(atstart.Input, bool, error) bool) {
		t.Helper()
		waitUntil(t, 30*time.Second, what, func() (bool, string) {
			in, chosen, err := choose(p)
			return ok(in, chosen, err), fmt.Sprintf("%+v %v %v", in, chosen, err)
		})
	}

	if _, ok, err := choose(pod(map[string]string{"app": "none"})); ok || err != nil {
		t.Errorf("no exporter: %v %v, want false and no error", ok, err)
	}
	c.createExporter(t, ns, "attach", map[string]string{"app": "attach"})
	c.createExporter(t, ns, "older", map[string]string{"tier": "web"}, withMode(jmxv1alpha1.InjectionModeAtStart, false),
		func(ex *jmxv1alpha1.PrometheusJmxExporter) { ex.Spec.Containers, ex.Spec.Port = []string{"app"}, 9500 })
	time.Sleep(1100 * time.Millisecond) // creation timestamps have whole seconds
	c.createExporter(t, ns, "a-younger", map[string]string{"app": "web"}, withMode(jmxv1alpha1.InjectionModeBoth, false))

	eventually("the younger exporter, alone", pod(map[string]string{"app": "web"}), func(in atstart.Input, ok bool, err error) bool {
		return ok && err == nil && in.Exporter == "a-younger"
	})
	in, ok, err := choose(pod(map[string]string{"app": "web", "tier": "web"}))
	if !ok || err != nil || in.Exporter != "older" {
		t.Fatalf("two exporters: %+v %v %v, want the older", in, ok, err)
	}
	if in.Port != 9500 || len(in.Containers) != 1 || in.Containers[0] != "app" || string(in.Config) != jmxv1alpha1.DefaultExporterConfig ||
		in.Image != "jmx-agent:own" || in.PullPolicy != corev1.PullNever || in.Delivery != atstart.DeliveryInitContainer ||
		in.AgentPath != jmxv1alpha1.DefaultAgentPath {
		t.Errorf("input %+v", in)
	}
	eventually("an exporter in mode Attach", pod(map[string]string{"app": "attach"}), func(_ atstart.Input, ok bool, err error) bool {
		return !ok && err == nil
	})
	// An older Attach exporter keeps the pod even when a younger one would
	// inject it at start ("attach" was created first).
	if in, ok, err := choose(pod(map[string]string{"app": "attach", "tier": "web"})); ok || err != nil {
		t.Errorf("a pod an older Attach exporter owns: %+v %v %v, want false and no error", in, ok, err)
	}
	// Not served: another namespace.
	other := pod(map[string]string{"app": "web"})
	other.Namespace = "kube-system"
	if _, ok, err := choose(other); ok || err != nil {
		t.Errorf("a namespace the operator does not serve: %v %v", ok, err)
	}

	// Exporters the operator could not act on: an error, no input.
	c.createExporter(t, ns, "nocm", map[string]string{"app": "nocm"}, withMode(jmxv1alpha1.InjectionModeAtStart, false), withConfigMap("missing"))
	eventually("a missing ConfigMap refused", pod(map[string]string{"app": "nocm"}), func(_ atstart.Input, ok bool, err error) bool {
		return !ok && err != nil && strings.Contains(err.Error(), jmxv1alpha1.ReasonConfigMapNotFound) && strings.Contains(err.Error(), "nocm")
	})
	c.createExporter(t, ns, "image", map[string]string{"app": "image"}, withMode(jmxv1alpha1.InjectionModeBoth, false),
		func(ex *jmxv1alpha1.PrometheusJmxExporter) {
			ex.Spec.Agent = &jmxv1alpha1.Agent{Image: "attacker/tools:1"}
		})
	eventually("an image not allowed refused", pod(map[string]string{"app": "image"}), func(_ atstart.Input, ok bool, err error) bool {
		return !ok && err != nil && strings.Contains(err.Error(), jmxv1alpha1.ReasonAgentImageNotAllowed)
	})
	c.createExporter(t, ns, "allowed", map[string]string{"app": "allowed"}, withMode(jmxv1alpha1.InjectionModeBoth, false),
		func(ex *jmxv1alpha1.PrometheusJmxExporter) {
			ex.Spec.Agent = &jmxv1alpha1.Agent{Image: "jmx-agent:second"}
		})
	eventually("an allowed image taken", pod(map[string]string{"app": "allowed"}), func(in atstart.Input, ok bool, err error) bool {
		return ok && err == nil && in.Image == "jmx-agent:second"
	})
	// A config an agent refused (status.rejectedConfig), as the reconciler
	// keeps it.
	c.configMap(t, ns, "refused", unclosedGroup)
	c.createExporter(t, ns, "rejected", map[string]string{"app": "rejected"}, withMode(jmxv1alpha1.InjectionModeBoth, false), withConfigMap("refused"))
	eventually("the exporter's config given before its verdict", pod(map[string]string{"app": "rejected"}), func(_ atstart.Input, ok bool, err error) bool {
		return ok && err == nil
	})
	for try := 0; ; try++ {
		ex := c.exporter(t, ns, "rejected")
		ex.Status.RejectedConfig = &jmxv1alpha1.RejectedConfig{ConfigSHA256: sha256Hex(unclosedGroup), Pod: "x", Container: "app",
			Message: collectorMessage, RejectedAt: metav1.Now()}
		_, err := c.jmx.JmxV1alpha1().PrometheusJmxExporters(ns).UpdateStatus(c.ctx, ex, metav1.UpdateOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) || try > 50 {
			t.Fatal(err)
		}
	}
	eventually("a config an agent refused refused", pod(map[string]string{"app": "rejected"}), func(_ atstart.Input, ok bool, err error) bool {
		return !ok && err != nil && strings.Contains(err.Error(), collectorMessage)
	})
}

// TestWithoutTheWebhookAtStartModesSaySo: an operator run without its
// admission webhook (--webhook=off: Options.NoWebhook) says, on an exporter
// in mode Both with restartOnRefusal, that no pod gets the agent at start
// (Degraded=True WebhookDisabled), attaches new pods like running ones, and
// evicts nothing: a recreated pod would come back without the agent.
func TestWithoutTheWebhookAtStartModesSaySo(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "nowebhook")
	labels := map[string]string{"app": "orders"}
	c.createPod(t, ns, podSpec{name: "a", labels: labels, owner: replicaSet("orders-1")}, "containerd://a1")
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) {
		return refusedBy(jvm.ReasonAttachDisabled, "-XX:+DisableAttachMechanism"), nil
	})
	c.runOperator(t, ns, operator.Options{Resync: time.Second, NoWebhook: true,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}})
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeBoth, true))

	deg := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonWebhookDisabled)
	for _, w := range []string{"--webhook=off", "no pod gets the agent at start", "restartOnRefusal evicts nothing"} {
		if !strings.Contains(deg.Message, w) {
			t.Errorf("Degraded message %q lacks %q", deg.Message, w)
		}
	}
	ready := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionFalse, jmxv1alpha1.ReasonAttachRefused)
	if !strings.Contains(ready.Message, "evicts nothing") {
		t.Errorf("Ready message %q does not say that nothing is evicted", ready.Message)
	}
	hold(t, 3*time.Second, "pod a not evicted", func() (bool, string) {
		_, err := c.kube.CoreV1().Pods(ns).Get(c.ctx, "a", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

// TestARefusedEvictionDoesNotHoldTheHandler: a PodDisruptionBudget whose
// status no controller has written yet makes the eviction API answer 429
// with a Retry-After; client-go's own retries of it (ten, each after the
// Retry-After) held the exporter's handler for about 100 s per look. The
// operator asks once and retries on its own backoff between looks: the
// refusal is reported, and tried again, within a minute.
func TestARefusedEvictionDoesNotHoldTheHandler(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "pdb-unobserved")
	labels := map[string]string{"app": "orders"}
	c.createPod(t, ns, podSpec{name: "a", labels: labels, owner: replicaSet("orders-1")}, "containerd://a1")
	c.noDisruptionBudget(t, ns, labels)
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) {
		return refusedBy(jvm.ReasonDynamicLoadingDisabled, "-XX:-EnableDynamicAgentLoading"), nil
	})
	c.runOperator(t, ns, operator.Options{Resync: time.Second,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}})
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeBoth, true))
	c.waitEvictionRefusedTwice(t, ns, "a")
	if _, err := c.kube.CoreV1().Pods(ns).Get(c.ctx, "a", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod a is gone although its budget allows no disruption: %v", err)
	}
}

// noDisruptionBudget creates PodDisruptionBudget orders in ns, which allows
// no disruption of the pods labels select; its status is left to the test.
func (c *cluster) noDisruptionBudget(t *testing.T, ns string, labels map[string]string) *policyv1.PodDisruptionBudget {
	t.Helper()
	pdb, err := c.kube.PolicyV1().PodDisruptionBudgets(ns).Create(c.ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "orders"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr(intstr.FromInt32(0)),
			Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pdb
}

// waitEvictionRefusedTwice waits until pod's EvictionRefused Event, a 429
// of the eviction API, has been counted twice: refused, reported, and tried
// again.
func (c *cluster) waitEvictionRefusedTwice(t *testing.T, ns, pod string) {
	t.Helper()
	waitUntil(t, time.Minute, "the eviction of "+pod+" refused twice", func() (bool, string) {
		list, err := c.kube.CoreV1().Events(ns).List(c.ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Reason == jmxv1alpha1.ReasonEvictionRefused && strings.Contains(e.Message, "429") {
				return e.Count >= 2, fmt.Sprintf("count %d: %s", e.Count, e.Message)
			}
		}
		return false, "no EvictionRefused Event"
	})
}
