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
	"k8s.io/apimachinery/pkg/runtime/schema"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// These tests prove how the verdict of an agent given at start reaches the
// exporter's status (issue 40, item 5), against a real API server: the test
// plays the kubelet, and the container logs (pods/log needs a real node;
// test/e2e reads them there) come from a scripted operator.LogReader.

// pickedUp is the line every JVM prints on stderr before the agent's.
const pickedUp = "Picked up JAVA_TOOL_OPTIONS: -javaagent:/handlerkit/jmx-agent/opt/handlerkit/jmx-agent.jar=9404:env:HANDLERKIT_JMX_CONFIG\n"

// servingLine is the line of an agent given at start that serves.
const servingLine = "handlerkit-jmx-agent: serving on :9404 (config sha256 3f9c0a5e1b2d)\n"

// goNamedGroup is a rule valid for Go's regexp, which the operator's
// prefilter uses, and refused by Java's, which the collector uses.
const goNamedGroup = "rules:\n- pattern: \"java.lang<type=(?P<t>\\\\w+)>\"\n"

// goNamedGroupMessage is what the collector says of it.
const goNamedGroupMessage = "Unknown inline modifier near index 23"

// logRead is one read of a container's log.
type logRead struct {
	pod, container string
	limit          int64
	at             time.Time
}

// scriptedLogs stands in for the container logs: answer says what the
// n-th read (from 1) of a pod's log returns.
type scriptedLogs struct {
	mu     sync.Mutex
	reads  []logRead
	answer func(pod string, n int) ([]byte, error)
}

func (s *scriptedLogs) ReadLogHead(_ context.Context, _, pod, container string, limit int64) ([]byte, error) {
	s.mu.Lock()
	s.reads = append(s.reads, logRead{pod, container, limit, time.Now()})
	n := 0
	for _, r := range s.reads {
		if r.pod == pod {
			n++
		}
	}
	answer := s.answer
	s.mu.Unlock()
	return answer(pod, n)
}

// of returns the reads of pod's log.
func (s *scriptedLogs) of(pod string) []logRead {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []logRead
	for _, r := range s.reads {
		if r.pod == pod {
			out = append(out, r)
		}
	}
	return out
}

// servingLogs are the logs of containers whose agents given at start all
// serve.
func servingLogs() operator.LogReader {
	return operator.LogReaderFunc(func(context.Context, string, string, string, int64) ([]byte, error) {
		return []byte(pickedUp + servingLine + "app started\n"), nil
	})
}

// atStartRecordFor is what the webhook records for an exporter with config
// on port 9404.
func atStartRecordFor(exporter, config string) *atstart.Record {
	rec := atStartRecord(exporter)
	rec.ConfigHash = atstart.ConfigHash([]byte(config))
	return rec
}

// TestAnAgentThatRefusesItsConfigAtStartMakesTheConfigInvalid: under mode
// AtStart, the agents given at start print that they refuse the config (the
// collector's message, for a rule Go's regexp takes and Java's does not).
// The operator reads their lines and records them (no JVM, a Failure
// ConfigInvalid with the collector's message and the pod's config hash),
// the exporter says ConfigValid=False ConfigInvalid with that message as
// under attach and keeps it in status.rejectedConfig, counts neither pod as
// serving, says so in Events, and the webhook's chooser gives the config
// to no further pod.
func TestAnAgentThatRefusesItsConfigAtStartMakesTheConfigInvalid(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "verdict")
	labels := map[string]string{"app": "orders"}
	logs := &scriptedLogs{answer: func(string, int) ([]byte, error) {
		return []byte(pickedUp + "handlerkit-jmx-agent: refused: config-invalid: " + goNamedGroupMessage + "\napp started\n"), nil
	}}
	nothing := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	nothing.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) { return loaded(r, ""), nil })
	var r *operator.Reconciler
	c.runOperatorWith(t, ns, operator.Options{Resync: time.Second, ContainerLogs: logs,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: nothing}},
		func(rec *operator.Reconciler) { r = rec })
	c.configMap(t, ns, "cfg", goNamedGroup)
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeAtStart, false), withConfigMap("cfg"))
	rec := atStartRecordFor("orders", goNamedGroup)
	for _, name := range []string{"a", "b"} {
		c.createPod(t, ns, podSpec{name: name, labels: labels, atStart: rec, owner: replicaSet("orders-1")}, "containerd://"+name+"1")
	}

	valid := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionConfigValid, metav1.ConditionFalse, jmxv1alpha1.ReasonConfigInvalid)
	if !strings.Contains(valid.Message, goNamedGroupMessage) {
		t.Errorf("ConfigValid message %q lacks the collector's message", valid.Message)
	}
	ex := c.exporter(t, ns, "orders")
	if rc := ex.Status.RejectedConfig; rc == nil || rc.ConfigSHA256 != sha256Hex(goNamedGroup) || rc.Message != goNamedGroupMessage ||
		rc.Container != "app" || (rc.Pod != "a" && rc.Pod != "b") {
		t.Errorf("status.rejectedConfig %+v, want the config's sha256 and the collector's message", rc)
	}
	for _, name := range []string{"a", "b"} {
		waitUntil(t, 30*time.Second, "the record of "+name, func() (bool, string) {
			got := c.record(t, ns, name)
			return got.Failure != nil, fmt.Sprintf("%+v", got)
		})
		got := c.record(t, ns, name)
		if got.Failure.Reason != jmxv1alpha1.ReasonConfigInvalid || got.Failure.Message != goNamedGroupMessage || len(got.JVMs) != 0 ||
			got.ConfigHash != rec.ConfigHash || got.InjectedBy != jmxv1alpha1.InjectedByAtStart || got.ContainerID != "containerd://"+name+"1" {
			t.Errorf("pod %s: record %+v (failure %+v), want no JVM, ConfigInvalid with the collector's message, config %s",
				name, got, got.Failure, rec.ConfigHash)
		}
		if _, ann := c.podRecord(t, ns, name); ann[operator.AnnotationScrape] != "" || ann[operator.AnnotationPorts] != "" {
			t.Errorf("pod %s: scrape annotations %v for an agent that serves nothing", name, ann)
		}
	}
	waitUntil(t, 30*time.Second, "neither pod serving", func() (bool, string) {
		ex = c.exporter(t, ns, "orders")
		ready := findCond(ex, jmxv1alpha1.ConditionReady)
		return ready != nil && ready.Status == metav1.ConditionFalse && ex.Status.InjectedPods == 0 && len(ex.Status.MetricsEndpoints) == 0,
			fmt.Sprintf("Ready %+v, injected %d, endpoints %+v", ready, ex.Status.InjectedPods, ex.Status.MetricsEndpoints)
	})
	if ready := findCond(ex, jmxv1alpha1.ConditionReady); ready.Reason == jmxv1alpha1.ReasonAllInjected || !strings.Contains(ready.Message, goNamedGroupMessage) {
		t.Errorf("Ready %s %q, want the pods reported with the agent's refusal", ready.Reason, ready.Message)
	}
	waitUntil(t, 30*time.Second, "the refusal's Events", func() (bool, string) {
		return c.hasEvent(t, ns, "Pod", "a", jmxv1alpha1.ReasonConfigInvalid, "given at start", goNamedGroupMessage) &&
			c.hasEvent(t, ns, "PrometheusJmxExporter", "orders", jmxv1alpha1.ReasonConfigInvalid, goNamedGroupMessage), "none"
	})
	// The next pod is created without the agent: the webhook's chooser
	// refuses the config an agent refused.
	waitUntil(t, 30*time.Second, "the chooser refusing the config", func() (bool, string) {
		in, ok, err := r.AtStartInput(c.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "orders-", Labels: labels}})
		return !ok && err != nil && strings.Contains(err.Error(), goNamedGroupMessage) && strings.Contains(err.Error(), jmxv1alpha1.ReasonConfigInvalid),
			fmt.Sprintf("%+v %v %v", in, ok, err)
	})
	// Each container start's log was read once.
	for _, name := range []string{"a", "b"} {
		if reads := logs.of(name); len(reads) != 1 || reads[0].container != "app" || reads[0].limit <= 0 || reads[0].limit > 64<<10 {
			t.Errorf("pod %s: log reads %+v, want one of container app, bounded", name, reads)
		}
	}
	if n := nothing.count(func(call) bool { return true }); n != 0 {
		t.Errorf("%d attaches under AtStart: %+v", n, nothing.all())
	}
}

// TestAnAgentAtStartServesOnlyOnceItsLineIsRead: a container given the
// agent at start whose JVM has not printed the agent's line yet (a slow
// start) is pending, not serving: no record, no endpoint. Its log is read
// again with backoff, not at each look (the exporter is looked at every
// second), and once the line says serving the record, the endpoint and
// Ready=True follow, and the log is read no more.
func TestAnAgentAtStartServesOnlyOnceItsLineIsRead(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "slowline")
	labels := map[string]string{"app": "orders"}
	const misses = 3
	logs := &scriptedLogs{answer: func(_ string, n int) ([]byte, error) {
		if n <= misses {
			return []byte(pickedUp), nil
		}
		return []byte(pickedUp + servingLine), nil
	}}
	c.runOperator(t, ns, operator.Options{Resync: time.Second, ContainerLogs: logs})
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeAtStart, false))
	c.createPod(t, ns, podSpec{name: "slow", labels: labels, atStart: atStartRecord("orders")}, "containerd://s1")

	waitUntil(t, 60*time.Second, "Ready=False pending on the agent's line", func() (bool, string) {
		ready := c.condition(t, ns, "orders", jmxv1alpha1.ConditionReady)
		return ready.Status == metav1.ConditionFalse && ready.Reason == jmxv1alpha1.ReasonInjectionPending &&
			strings.Contains(ready.Message, "slow/app") && strings.Contains(ready.Message, "agent's line"), fmt.Sprintf("%+v", ready)
	})
	if n := len(logs.of("slow")); n <= misses {
		if got := c.record(t, ns, "slow"); got.ContainerID != "" {
			t.Errorf("a record %+v before the agent's line was read", got)
		}
		if _, ok := endpointOf(c.exporter(t, ns, "orders"), "slow"); ok {
			t.Error("an endpoint before the agent's line was read")
		}
	}
	c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected)
	got := c.record(t, ns, "slow")
	if got.InjectedBy != jmxv1alpha1.InjectedByAtStart || len(got.JVMs) != 1 || got.JVMs[0].Port != 9404 || got.Failure != nil ||
		got.ConfigHash != atStartRecord("orders").ConfigHash {
		t.Errorf("record %+v, want the JVM on 9404 given at start", got)
	}
	if e, ok := endpointOf(c.exporter(t, ns, "orders"), "slow"); !ok || e.InjectedBy != jmxv1alpha1.InjectedByAtStart || e.Port != 9404 {
		t.Errorf("endpoint %+v (found %v)", e, ok)
	}
	hold(t, 4*time.Second, "no more reads once the line was read", func() (bool, string) {
		n := len(logs.of("slow"))
		return n == misses+1, fmt.Sprintf("%d reads", n)
	})
	// Reads were spaced by a growing backoff, not made at each look.
	reads := logs.of("slow")
	for i := 1; i < len(reads); i++ {
		if gap, min := reads[i].at.Sub(reads[i-1].at), time.Second<<(i-1); gap < min {
			t.Errorf("read %d came %s after the one before, before its backoff of %s", i+1, gap, min)
		}
	}
}

// TestAnAgentLineNeverSeenIsNotServing: a container given the agent at
// start whose log holds no agent's line in the bytes the operator reads is
// reported "agent line not seen" (pending, never serving; an Event), and
// its log is not read again; one whose log the operator may not read is
// pending with the grant it needs named.
func TestAnAgentLineNeverSeenIsNotServing(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "noline")
	labels := map[string]string{"app": "orders"}
	logs := &scriptedLogs{answer: func(pod string, _ int) ([]byte, error) {
		if pod == "denied" {
			return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods/log"}, pod, fmt.Errorf("RBAC: access denied"))
		}
		// An application that prints much before its JVM starts, as
		// much as any read returns.
		return []byte(strings.Repeat("starting the application, step by step\n", 2000)), nil
	}}
	c.runOperator(t, ns, operator.Options{Resync: time.Second, ContainerLogs: logs})
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeAtStart, false))
	c.createPod(t, ns, podSpec{name: "chatty", labels: labels, atStart: atStartRecord("orders")}, "containerd://c1")
	c.createPod(t, ns, podSpec{name: "denied", labels: labels, atStart: atStartRecord("orders")}, "containerd://d1")

	waitUntil(t, 60*time.Second, "the Event and the Ready message", func() (bool, string) {
		ready := c.condition(t, ns, "orders", jmxv1alpha1.ConditionReady)
		return c.hasEvent(t, ns, "Pod", "chatty", jmxv1alpha1.ReasonAgentLineNotSeen, "not seen", "not counted as serving") &&
			ready.Status == metav1.ConditionFalse && strings.Contains(ready.Message, "chatty/app") && strings.Contains(ready.Message, "not seen") &&
			strings.Contains(ready.Message, "denied/app") && strings.Contains(ready.Message, "pods/log"), fmt.Sprintf("%+v", ready)
	})
	hold(t, 4*time.Second, "chatty not read again, neither pod serving", func() (bool, string) {
		ex := c.exporter(t, ns, "orders")
		n := len(logs.of("chatty"))
		return n == 1 && len(ex.Status.MetricsEndpoints) == 0 && ex.Status.InjectedPods == 0,
			fmt.Sprintf("%d reads, endpoints %+v, injected %d", n, ex.Status.MetricsEndpoints, ex.Status.InjectedPods)
	})
	for _, name := range []string{"chatty", "denied"} {
		if got := c.record(t, ns, name); got.ContainerID != "" {
			t.Errorf("pod %s: a record %+v without the agent's line", name, got)
		}
	}
}
