package e2e

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// TestAtStartRefusalIsSeen (issue 40, item 5): an exporter of mode AtStart
// whose rule is a Go-style named group, which the operator's Go prefilter
// takes and the collector (Java's regex) refuses, and a Deployment of two
// replicas created after it. The first pod gets the agent at start alone
// (the change is tried on one pod first), its agent prints that it refuses
// the config, the other pod is created without the agent (ChangeBeingTried),
// and the JVMs run on. The operator reads
// the agents' lines from the containers' logs (get pods/log, which the
// shipped RBAC grants): within a minute of the pods running, ConfigValid is
// False, ConfigInvalid, with the collector's message, as under attach, the
// config is in status.rejectedConfig, and neither pod counts as serving (no
// endpoint, Ready not AllInjected, the canary's record a ConfigInvalid failure).
// TestAtStart shows that an agent given at start that serves is still
// reported serving.
func TestAtStartRefusalIsSeen(t *testing.T) {
	t.Parallel()
	op := deployAtStartOperator(t, "e2e-verdict")
	ns, ctx := op.ns, t.Context()
	labels := map[string]string{"app": "verdict"}
	const config = "rules:\n- pattern: \"java.lang<type=(?P<t>\\\\w+)>\"\n"
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap("cfg", config), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createExporter(t, ns, exporter("verdict", labels, withMode(jmxv1alpha1.InjectionModeAtStart), withConfig("cfg")))
	waitCondition(t, ns, "verdict", jmxv1alpha1.ConditionConfigValid, metav1.ConditionTrue, jmxv1alpha1.ReasonConfigLoaded, time.Minute)
	waitWebhookInjects(t, ns, labels, "verdict")

	pod := jvmPod("", labels, testimages.JVMAppRef)
	createDeployment(t, ns, "verdict", labels, 2, pod)
	var pods []string
	waitFor(t, 3*time.Minute, "the Deployment's two pods", func() (bool, string) {
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
			LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: labels})})
		if err != nil {
			return false, err.Error()
		}
		pods = nil
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil {
				pods = append(pods, p.Name)
			}
		}
		sort.Strings(pods)
		return len(pods) == 2, fmt.Sprintf("pods %v", pods)
	})
	// The change is tried on one pod first (issue 40, item 1): one pod has
	// the agent, the other was created without it, and says why.
	var canary, other string
	for _, name := range pods {
		p := waitRunning(t, ns, name)
		if _, ok, _ := atstart.ParseRecord(p); ok {
			canary = name
		} else {
			other = name
			if notes := p.Annotations[atstart.AnnotationNotes]; !strings.Contains(notes, jmxv1alpha1.ReasonChangeBeingTried) {
				t.Errorf("pod %s, created without the agent, has notes %q, want %s", name, notes, jmxv1alpha1.ReasonChangeBeingTried)
			}
		}
	}
	if canary == "" || other == "" {
		t.Fatalf("pods %v: want exactly one given the agent at start", pods)
	}

	// The bound: the status says so within a minute of the pods
	// running.
	ex := waitCondition(t, ns, "verdict", jmxv1alpha1.ConditionConfigValid, metav1.ConditionFalse, jmxv1alpha1.ReasonConfigInvalid, time.Minute)
	valid := findCond(ex.Status.Conditions, jmxv1alpha1.ConditionConfigValid)
	rc := ex.Status.RejectedConfig
	if rc == nil || rc.ConfigSHA256 != sha256Hex(config) || !strings.Contains(rc.Message, "Unknown inline modifier") ||
		!strings.Contains(valid.Message, rc.Message) {
		t.Errorf("status.rejectedConfig %+v and ConfigValid %q, want the config's sha256 and the collector's message in both", rc, valid.Message)
	}
	waitFor(t, time.Minute, "neither pod serving", func() (bool, string) {
		ex = getExporter(t, ns, "verdict")
		ready := findCond(ex.Status.Conditions, jmxv1alpha1.ConditionReady)
		return ready.Status == metav1.ConditionFalse && ready.Reason != jmxv1alpha1.ReasonAllInjected && ex.Status.InjectedPods == 0 &&
				len(ex.Status.MetricsEndpoints) == 0,
			fmt.Sprintf("Ready %s/%s %q, injected %d, endpoints %+v", ready.Status, ready.Reason, ready.Message, ex.Status.InjectedPods, ex.Status.MetricsEndpoints)
	})
	for _, name := range []string{canary} {
		var rec operator.PodRecord
		waitFor(t, time.Minute, "the record of "+name, func() (bool, string) {
			p := waitRunning(t, ns, name)
			rec = operator.PodRecord{}
			_ = json.Unmarshal([]byte(p.Annotations[operator.AnnotationAgents]), &rec)
			return rec.Containers["app"].Failure != nil, fmt.Sprintf("%+v", rec)
		})
		if c := rec.Containers["app"]; c.Failure.Reason != jmxv1alpha1.ReasonConfigInvalid || !strings.Contains(c.Failure.Message, "Unknown inline modifier") ||
			len(c.JVMs) != 0 || c.InjectedBy != jmxv1alpha1.InjectedByAtStart {
			t.Errorf("pod %s: record %+v (failure %+v), want no JVM and ConfigInvalid with the collector's message", name, c, c.Failure)
		}
		if n, lines := agentLoads(t, ns, name, "app"); n != 1 || !strings.Contains(lines[0], "refused: config-invalid: ") {
			t.Errorf("pod %s: agent lines %q, want exactly one config-invalid refusal", name, lines)
		}
	}
	if !hasEvent(events(t, ns, "Pod", canary), jmxv1alpha1.ReasonConfigInvalid) {
		t.Errorf("no %s Event on the canary %s", jmxv1alpha1.ReasonConfigInvalid, canary)
	}
	if n, lines := agentLoads(t, ns, other, "app"); n != 0 {
		t.Errorf("pod %s, created without the agent, printed agent lines %q", other, lines)
	}
	// The JVMs run on without the agent.
	holds(t, 10*time.Second, "both JVMs running", func() (bool, string) {
		for _, name := range pods {
			p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cs := p.Status.ContainerStatuses
			if len(cs) != 1 || cs[0].State.Running == nil || cs[0].RestartCount != 0 {
				return false, fmt.Sprintf("pod %s: %+v", name, cs)
			}
		}
		return true, ""
	})
	if ready := findCond(getExporter(t, ns, "verdict").Status.Conditions, jmxv1alpha1.ConditionReady); ready.Reason == jmxv1alpha1.ReasonAllInjected {
		t.Errorf("Ready %s/%s %q", ready.Status, ready.Reason, ready.Message)
	}
}
