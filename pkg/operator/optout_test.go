package operator_test

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// These tests prove the owners' opt-out (issue 41): a pod or a namespace
// labelled jmx.handlerkit.dev/inject=false is left alone by every path of
// the operator, against a real API server (the test plays the kubelet).

// optOutPatch labels an object with the opt-out.
var optOutPatch = []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, atstart.LabelOptOut, atstart.OptOutValue))

// optOutPod labels pod name with the opt-out.
func (c *cluster) optOutPod(t *testing.T, ns, name string) {
	t.Helper()
	if _, err := c.kube.CoreV1().Pods(ns).Patch(c.ctx, name, types.MergePatchType, optOutPatch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// optOutNamespace labels namespace ns with the opt-out.
func (c *cluster) optOutNamespace(t *testing.T, ns string) {
	t.Helper()
	if _, err := c.kube.CoreV1().Namespaces().Patch(c.ctx, ns, types.MergePatchType, optOutPatch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// annotations are pod name's annotations as they are now.
func (c *cluster) annotations(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	p, err := c.kube.CoreV1().Pods(ns).Get(c.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Annotations
}

// attachModes are the modes in which the operator attaches to running JVMs.
var attachModes = []jmxv1alpha1.InjectionMode{jmxv1alpha1.InjectionModeAttach, jmxv1alpha1.InjectionModeBoth}

// TestAPodThatOptsOutAfterInjectionIsNotTouchedAgain: pods a and b are
// attached; a is then labelled jmx.handlerkit.dev/inject=false. Its JVM
// restarts and the config changes: b is reconfigured, a is neither attached
// nor reconfigured, its annotations stay exactly as they were, the Ready
// message says it opted out, and the webhook's chooser would not give it
// the agent at its next creation. Under modes Attach and Both.
func TestAPodThatOptsOutAfterInjectionIsNotTouchedAgain(t *testing.T) {
	t.Parallel()
	for _, mode := range attachModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 3*time.Minute)
			ns := c.namespace(t, "optout-pod")
			labels := map[string]string{"app": "orders"}
			for _, name := range []string{"a", "b"} {
				c.createJVMPod(t, ns, name, labels, "containerd://"+name+"1")
			}
			c.configMap(t, ns, "cfg", "rules:\n- pattern: \".*\"\n")
			s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
			s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) { return loaded(r, ""), nil })
			var r *operator.Reconciler
			c.runOperatorWith(t, ns, operator.Options{Resync: time.Second, BreakerWindow: time.Second,
				Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}},
				func(rec *operator.Reconciler) { r = rec })
			c.createExporter(t, ns, "orders", labels, withMode(mode, false), withConfigMap("cfg"))
			waitUntil(t, time.Minute, "a and b injected", func() (bool, string) {
				ex := c.exporter(t, ns, "orders")
				return ex.Status.InjectedPods == 2, fmt.Sprintf("%d injected", ex.Status.InjectedPods)
			})

			// The label comes before the restart in the pod's history, so
			// every look that sees the restart sees the label too.
			c.optOutPod(t, ns, "a")
			kept := c.annotations(t, ns, "a")
			if kept[operator.AnnotationAgents] == "" {
				t.Fatalf("pod a has no record before the test: %v", kept)
			}
			onA := func(x call) bool { return x.pod == "a" }
			before := s.count(onA)

			// Its JVM restarts, and the config changes.
			c.startContainer(t, ns, "a", "containerd://a2", &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error",
				StartedAt: metav1.NewTime(time.Now().Add(-time.Minute)), FinishedAt: metav1.Now(), ContainerID: "containerd://a1"})
			const v2 = "rules:\n- pattern: \"java.lang.*\"\n"
			c.configMap(t, ns, "cfg", v2)
			waitUntil(t, time.Minute, "b reconfigured", func() (bool, string) {
				got := c.record(t, ns, "b")
				return got.ConfigHash == sha256Hex(v2)[:16], "b runs " + got.ConfigHash
			})
			hold(t, 4*time.Second, "pod a left alone", func() (bool, string) {
				if n := s.count(onA); n != before {
					return false, fmt.Sprintf("%d calls on pod a after it opted out: %+v", n-before, s.all())
				}
				if got := c.annotations(t, ns, "a"); !maps.Equal(got, kept) {
					return false, fmt.Sprintf("annotations %v, were %v", got, kept)
				}
				return true, ""
			})
			waitUntil(t, 30*time.Second, "Ready saying pod a opted out", func() (bool, string) {
				ready := c.condition(t, ns, "orders", jmxv1alpha1.ConditionReady)
				return ready.Reason == jmxv1alpha1.ReasonAllInjected && strings.Contains(ready.Message, "1 pods labelled "+atstart.LabelOptOut+"=false") &&
					strings.Contains(ready.Message, ": a"), ready.Reason + ": " + ready.Message
			})
			if mode == jmxv1alpha1.InjectionModeBoth {
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "orders-",
					Labels: map[string]string{"app": "orders", atstart.LabelOptOut: atstart.OptOutValue}}}
				waitUntil(t, 30*time.Second, "the chooser leaving an opted-out pod alone", func() (bool, string) {
					in, ok, err := r.AtStartInput(c.ctx, pod)
					return !ok && err == nil, fmt.Sprintf("%+v %v %v", in, ok, err)
				})
				pod.Labels = labels
				if _, ok, err := r.AtStartInput(c.ctx, pod); !ok || err != nil {
					t.Errorf("the chooser leaves alone a pod that did not opt out: %v %v", ok, err)
				}
			}
		})
	}
}

// TestANamespaceThatOptedOutGetsNothing: in a namespace labelled
// jmx.handlerkit.dev/inject=false before the exporter, no JVM is attached,
// no pod annotated, Ready says NamespaceOptedOut, and the webhook's chooser
// gives no pod the agent at start. Under modes Attach and Both.
func TestANamespaceThatOptedOutGetsNothing(t *testing.T) {
	t.Parallel()
	for _, mode := range attachModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 3*time.Minute)
			ns := c.namespace(t, "optout-ns")
			c.optOutNamespace(t, ns)
			labels := c.jvmPods(t, ns)
			s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
			s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) { return loaded(r, ""), nil })
			var r *operator.Reconciler
			c.runOperatorWith(t, ns, operator.Options{Resync: time.Second, BreakerWindow: time.Second,
				Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}},
				func(rec *operator.Reconciler) { r = rec })
			c.createExporter(t, ns, "orders", labels, withMode(mode, false))
			ready := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionFalse, jmxv1alpha1.ReasonNamespaceOptedOut)
			if !strings.Contains(ready.Message, "namespace "+ns) || !strings.Contains(ready.Message, atstart.LabelOptOut) {
				t.Errorf("Ready message %q names neither the namespace nor the label", ready.Message)
			}
			hold(t, 4*time.Second, "nothing attached or annotated", func() (bool, string) {
				if n := s.count(func(call) bool { return true }); n != 0 {
					return false, fmt.Sprintf("%d attaches: %+v", n, s.all())
				}
				for _, name := range []string{"a", "b", "c"} {
					if ann := c.annotations(t, ns, name); len(ann) != 0 {
						return false, fmt.Sprintf("pod %s annotated %v", name, ann)
					}
				}
				return true, ""
			})
			if mode == jmxv1alpha1.InjectionModeBoth {
				if in, ok, err := r.AtStartInput(c.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "orders-", Labels: labels}}); ok || err != nil {
					t.Errorf("the chooser in a namespace that opted out: %+v %v %v", in, ok, err)
				}
			}
		})
	}
}

// TestRestartOnRefusalEvictsNoPodThatOptedOut: pods a (labelled
// jmx.handlerkit.dev/inject=false) and b both refuse a live attach; with
// restartOnRefusal, b is evicted and a never is (a comes first by name).
func TestRestartOnRefusalEvictsNoPodThatOptedOut(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "optout-evict")
	labels := map[string]string{"app": "orders"}
	c.createPod(t, ns, podSpec{name: "a", labels: map[string]string{"app": "orders", atstart.LabelOptOut: atstart.OptOutValue},
		owner: replicaSet("orders-1")}, "containerd://a1")
	c.createPod(t, ns, podSpec{name: "b", labels: labels, owner: replicaSet("orders-1")}, "containerd://b1")
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) {
		return refusedBy(jvm.ReasonAttachDisabled, "-XX:+DisableAttachMechanism"), nil
	})
	c.runOperator(t, ns, operator.Options{Resync: time.Second, BreakerWindow: time.Second, ReplacementWait: time.Minute,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}})
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeBoth, true))
	waitUntil(t, time.Minute, "pod b evicted", func() (bool, string) {
		if c.gone(t, ns, "a") {
			t.Fatal("pod a, which opted out, was evicted")
		}
		return c.gone(t, ns, "b"), "b is there"
	})
	c.noneGone(t, ns, 4*time.Second, "pod a never evicted", "a")
	if n := s.count(func(x call) bool { return x.pod == "a" }); n != 0 {
		t.Errorf("%d attaches to pod a, which opted out", n)
	}
}

// TestAnUnreadableNamespaceFailsClosed: the operator may not read the
// exporter's namespace (its RBAC lacks get on namespaces), so it cannot
// know whether the namespace opted out: it attaches to none of its pods,
// says why in Degraded (naming the grant) and an Event, and the webhook's
// chooser leaves new pods without the agent with that reason.
func TestAnUnreadableNamespaceFailsClosed(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "optout-forbidden")
	c.wrap = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet && req.URL.Path == "/api/v1/namespaces/"+ns {
				body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"namespaces %q is forbidden: User \"operator\" cannot get resource \"namespaces\"","reason":"Forbidden","code":403}`, ns)
				return &http.Response{StatusCode: http.StatusForbidden, Header: http.Header{"Content-Type": []string{"application/json"}},
					Body: io.NopCloser(bytes.NewBufferString(body)), Request: req}, nil
			}
			return rt.RoundTrip(req)
		})
	}
	labels := c.jvmPods(t, ns)
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) { return loaded(r, ""), nil })
	var r *operator.Reconciler
	c.runOperatorWith(t, ns, operator.Options{Resync: time.Second, BreakerWindow: time.Second,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}},
		func(rec *operator.Reconciler) { r = rec })
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeBoth, false))
	deg := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonNamespaceUnreadable)
	for _, w := range []string{"cannot read namespace " + ns, "get on namespaces", "nothing to the namespace's pods"} {
		if !strings.Contains(deg.Message, w) {
			t.Errorf("Degraded message %q lacks %q", deg.Message, w)
		}
	}
	if ready := c.condition(t, ns, "orders", jmxv1alpha1.ConditionReady); ready.Reason != jmxv1alpha1.ReasonNamespaceUnreadable {
		t.Errorf("Ready %s %s: %s", ready.Status, ready.Reason, ready.Message)
	}
	waitUntil(t, 30*time.Second, "the Warning Event", func() (bool, string) {
		return c.hasEvent(t, ns, "PrometheusJmxExporter", "orders", jmxv1alpha1.ReasonNamespaceUnreadable, "get on namespaces"), "none"
	})
	hold(t, 3*time.Second, "nothing attached", func() (bool, string) {
		n := s.count(func(call) bool { return true })
		return n == 0, fmt.Sprintf("%d attaches: %+v", n, s.all())
	})
	_, ok, err := r.AtStartInput(c.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "orders-", Labels: labels}})
	if ok || err == nil || !strings.Contains(err.Error(), "cannot read namespace "+ns) {
		t.Errorf("the chooser with the namespace unreadable: %v %v, want no agent and the reason", ok, err)
	}
}

// TestAHarmedPodThatOptedOutIsNotEvicted: a pod given the agent at start,
// labelled jmx.handlerkit.dev/inject=false, whose JVM then ends at once
// (what opens the at-start breaker and has the harmed pod evicted) is left
// alone: no breaker, no eviction, Ready=False OptedOut.
func TestAHarmedPodThatOptedOutIsNotEvicted(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "optout-harmed")
	c.runOperator(t, ns, operator.Options{Resync: time.Second, BreakerWindow: 30 * time.Second, ContainerLogs: servingLogs()})
	labels := map[string]string{"app": "jlinked"}
	c.createExporter(t, ns, "jlinked", labels, withMode(jmxv1alpha1.InjectionModeAtStart, false))
	ex := c.exporter(t, ns, "jlinked")
	c.createPod(t, ns, podSpec{name: "harmed", labels: map[string]string{"app": "jlinked", atstart.LabelOptOut: atstart.OptOutValue},
		atStart: atStartRecordOf(ex, true), owner: replicaSet("jlinked-1")}, "containerd://harmed1")
	c.endContainer(t, ns, "harmed", "containerd://harmed1", 1, 200*time.Millisecond)
	waitUntil(t, time.Minute, "a status written after the JVM ended", func() (bool, string) {
		got := c.exporter(t, ns, "jlinked")
		ready := findCond(got, jmxv1alpha1.ConditionReady)
		return ready != nil && got.Status.ObservedGeneration == ex.Generation, fmt.Sprintf("%+v", got.Status)
	})
	hold(t, 5*time.Second, "no breaker, the pod kept", func() (bool, string) {
		if cb := c.exporter(t, ns, "jlinked").Status.CircuitBreaker; cb != nil {
			return false, fmt.Sprintf("breaker %+v", cb)
		}
		return !c.gone(t, ns, "harmed"), "pod harmed evicted"
	})
	if ready := c.condition(t, ns, "jlinked", jmxv1alpha1.ConditionReady); ready.Reason != jmxv1alpha1.ReasonOptedOut || !strings.Contains(ready.Message, "harmed") {
		t.Errorf("Ready %s %q, want OptedOut naming the pod", ready.Reason, ready.Message)
	}
}
