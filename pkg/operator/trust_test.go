package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// These tests prove issue 23's promises on the operator's side against a
// real API server (test/e2e/trust_test.go proves them on a real node): what
// runs in other people's pods is the operator's decision, a status the API
// server refuses is not sent again, and pods are left as they were found.

// requests records the requests a scripted strategy got, per pod.
type requests struct {
	s *scripted
	r map[string][]inject.Request
}

func loadingStrategy() *requests {
	q := &requests{s: &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}, r: map[string][]inject.Request{}}
	q.s.setAnswer(func(c call, r inject.Request) (inject.Outcome, error) {
		q.s.mu.Lock()
		q.r[c.pod] = append(q.r[c.pod], r)
		q.s.mu.Unlock()
		return loaded(r, ""), nil
	})
	return q
}

func (q *requests) of(pod string) []inject.Request {
	q.s.mu.Lock()
	defer q.s.mu.Unlock()
	return append([]inject.Request(nil), q.r[pod]...)
}

// passAgain changes the exporter's spec (a new generation) and waits until
// the operator has written a status for it: one more full pass of the
// operator over the exporter, with no sleep.
func (c *cluster) passAgain(t *testing.T, ns, name string) {
	t.Helper()
	c.updateExporter(t, ns, name, func(ex *jmxv1alpha1.PrometheusJmxExporter) { ex.Spec.Port++ })
	gen := c.exporter(t, ns, name).Generation
	waitUntil(t, 90*time.Second, name+" observed generation", func() (bool, string) {
		got := c.exporter(t, ns, name).Status.ObservedGeneration
		return got == gen, fmt.Sprintf("observed %d, want %d", got, gen)
	})
}

func (c *cluster) pod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := c.kube.CoreV1().Pods(ns).Get(c.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAnAgentTheOperatorDoesNotAllowRunsNowhere: an exporter that names an
// image off the operator's allowlist, or agent paths other than the
// operator's, gets Degraded=True and Ready=False with its reason, a Warning
// Event, and nothing else: no injection in any pod, no annotation, over a
// later pass too. An allowlisted image is used, always with the operator's
// paths; a path equal to the operator's own is accepted.
func TestAnAgentTheOperatorDoesNotAllowRunsNowhere(t *testing.T) {
	c := newCluster(t, 4*time.Minute)
	ns := c.namespace(t, "allow")
	q := loadingStrategy()
	c.runOperator(t, ns, operator.Options{Resync: 2 * time.Second, BreakerWindow: time.Second,
		AgentImage: "jmx-agent:own", AgentPath: "/opt/own/agent.jar", AttachHelperPath: "/opt/own/jmx-attach",
		AllowedAgentImages: []string{"jmx-agent:second"},
		Strategies:         map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: q.s}})
	refused := []struct {
		name, reason, word string
		agent              jmxv1alpha1.Agent
	}{
		{"image", jmxv1alpha1.ReasonAgentImageNotAllowed, "--allowed-agent-images", jmxv1alpha1.Agent{Image: "attacker/tools:latest"}},
		{"path", jmxv1alpha1.ReasonAgentPathNotAllowed, "spec.agent.path", jmxv1alpha1.Agent{Path: "/bin/sh"}},
		{"helper", jmxv1alpha1.ReasonAgentPathNotAllowed, "spec.agent.attachHelperPath", jmxv1alpha1.Agent{AttachHelperPath: "/tmp/x"}},
		{"both", jmxv1alpha1.ReasonAgentImageNotAllowed, "attacker/tools:1", jmxv1alpha1.Agent{Image: "attacker/tools:1", Path: "/x.jar"}},
	}
	for _, r := range refused {
		labels := map[string]string{"app": r.name}
		c.createJVMPod(t, ns, r.name+"-pod", labels, "containerd://"+r.name)
		agent := r.agent
		c.createExporter(t, ns, r.name, labels, func(ex *jmxv1alpha1.PrometheusJmxExporter) { ex.Spec.Agent = &agent })
	}
	for _, name := range []string{"second", "samepath"} {
		labels := map[string]string{"app": name}
		c.createJVMPod(t, ns, name+"-pod", labels, "containerd://"+name)
	}
	c.createExporter(t, ns, "second", map[string]string{"app": "second"}, func(ex *jmxv1alpha1.PrometheusJmxExporter) {
		ex.Spec.Agent = &jmxv1alpha1.Agent{Image: "jmx-agent:second"}
	})
	c.createExporter(t, ns, "samepath", map[string]string{"app": "samepath"}, func(ex *jmxv1alpha1.PrometheusJmxExporter) {
		ex.Spec.Agent = &jmxv1alpha1.Agent{Path: "/opt/own/agent.jar", AttachHelperPath: "/opt/own/jmx-attach"}
	})

	for _, r := range refused {
		d := c.waitCondition(t, ns, r.name, jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, r.reason)
		if !strings.Contains(d.Message, r.word) || !strings.Contains(d.Message, "nothing was run") {
			t.Errorf("%s: Degraded message %q does not name %q and what happened", r.name, d.Message, r.word)
		}
		c.waitCondition(t, ns, r.name, jmxv1alpha1.ConditionReady, metav1.ConditionFalse, r.reason)
		waitUntil(t, 30*time.Second, r.name+" Warning Event", func() (bool, string) {
			return c.hasEvent(t, ns, "PrometheusJmxExporter", r.name, r.reason, r.word), "no Event"
		})
	}
	for _, name := range []string{"second", "samepath"} {
		c.waitCondition(t, ns, name, jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected)
	}
	if got := q.of("second-pod"); len(got) != 1 || got[0].Image != "jmx-agent:second" || got[0].AgentPath != "/opt/own/agent.jar" ||
		got[0].AttachHelperPath != "/opt/own/jmx-attach" {
		t.Errorf("the allowlisted image's requests: %+v", got)
	}
	if got := q.of("samepath-pod"); len(got) != 1 || got[0].Image != "jmx-agent:own" {
		t.Errorf("the default image's requests: %+v", got)
	}
	// One more pass over each refused exporter: still refused, still
	// nothing run, no annotation.
	for _, r := range refused {
		c.passAgain(t, ns, r.name)
		c.waitCondition(t, ns, r.name, jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, r.reason)
		if got := q.of(r.name + "-pod"); len(got) != 0 {
			t.Errorf("%s: the strategy ran %d times", r.name, len(got))
		}
		for k := range c.pod(t, ns, r.name+"-pod").Annotations {
			if strings.HasPrefix(k, "jmx.handlerkit.dev/") || strings.HasPrefix(k, "prometheus.io/") {
				t.Errorf("%s: the pod got annotation %s", r.name, k)
			}
		}
	}
	if !strings.Contains(c.log.String(), jmxv1alpha1.ReasonAgentImageNotAllowed) {
		t.Error("the operator's log does not say it refused the image")
	}
}

// TestAStrategyThatIsNotEnabledIsReported: Exec is opt-in; an exporter that
// asks for it from an operator without it gets Degraded=True and
// Ready=False, reason StrategyDisabled, with a message that says how to
// enable it, a Warning Event, and no pod is touched.
func TestAStrategyThatIsNotEnabledIsReported(t *testing.T) {
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "strategy")
	q := loadingStrategy()
	c.runOperator(t, ns, operator.Options{
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: q.s}})
	labels := map[string]string{"app": "exec"}
	c.createJVMPod(t, ns, "a", labels, "containerd://a1")
	c.createExporter(t, ns, "exec", labels, func(ex *jmxv1alpha1.PrometheusJmxExporter) {
		ex.Spec.Injection.Strategy = jmxv1alpha1.InjectionExec
	})
	d := c.waitCondition(t, ns, "exec", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonStrategyDisabled)
	for _, w := range []string{"Exec", "--strategies", "EphemeralContainer", "RBAC"} {
		if !strings.Contains(d.Message, w) {
			t.Errorf("message %q does not mention %s", d.Message, w)
		}
	}
	c.waitCondition(t, ns, "exec", jmxv1alpha1.ConditionReady, metav1.ConditionFalse, jmxv1alpha1.ReasonStrategyDisabled)
	waitUntil(t, 30*time.Second, "a StrategyDisabled Event", func() (bool, string) {
		return c.hasEvent(t, ns, "PrometheusJmxExporter", "exec", jmxv1alpha1.ReasonStrategyDisabled, "Exec"), "no Event"
	})
	c.passAgain(t, ns, "exec")
	if n := len(q.of("a")); n != 0 {
		t.Errorf("the pod was injected %d times", n)
	}
}

// startTwo plays the kubelet for a pod with two running containers, app and
// side, as a shareProcessNamespace pod looks to the operator.
func (c *cluster) startTwo(t *testing.T, ns, name string, labels map[string]string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{ShareProcessNamespace: ptrTo(true),
			Containers: []corev1.Container{{Name: "app", Image: "jvm-app"}, {Name: "side", Image: "jvm-app"}}}}
	p, err := c.kube.CoreV1().Pods(ns).Create(c.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.7"
	p.Status.ContainerStatuses = []corev1.ContainerStatus{
		{Name: "app", ContainerID: "containerd://" + name + "-app", Ready: true, Image: "jvm-app", ImageID: "sha256:1", State: running},
		{Name: "side", ContainerID: "containerd://" + name + "-side", Ready: true, Image: "jvm-app", ImageID: "sha256:1", State: running},
	}
	if _, err := c.kube.CoreV1().Pods(ns).UpdateStatus(c.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestEndpointsAreUniquePerPodAndPort: the measurement. Two
// containers of a pod each report the same JVM on the same port (as each
// saw both through a shared process namespace); the status lists it once,
// and the API server accepts it at the first write.
func TestEndpointsAreUniquePerPodAndPort(t *testing.T) {
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "unique")
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) {
		return inject.Outcome{Results: []jvm.InjectResult{{PID: 41, NSPID: 7, MainClass: "app.Main", Status: jvm.OutcomeOK, Port: 9404}}}, nil
	})
	c.runOperator(t, ns, operator.Options{BreakerWindow: time.Second,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}})
	labels := map[string]string{"app": "shared"}
	c.startTwo(t, ns, "shared", labels)
	c.createExporter(t, ns, "shared", labels)
	c.waitCondition(t, ns, "shared", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected)
	ex := c.exporter(t, ns, "shared")
	if len(ex.Status.MetricsEndpoints) != 1 || ex.Status.MetricsEndpoints[0].Port != 9404 {
		t.Errorf("endpoints %+v, want one on 9404", ex.Status.MetricsEndpoints)
	}
	if d := findCond(ex, jmxv1alpha1.ConditionDegraded); d == nil || d.Status != metav1.ConditionFalse {
		t.Errorf("Degraded %+v", d)
	}
	if strings.Contains(c.log.String(), "refused the status") {
		t.Errorf("the API server refused a status:\n%s", c.log.String())
	}
}

func findCond(ex *jmxv1alpha1.PrometheusJmxExporter, typ string) *metav1.Condition {
	for i := range ex.Status.Conditions {
		if ex.Status.Conditions[i].Type == typ {
			return &ex.Status.Conditions[i]
		}
	}
	return nil
}

// refuseStatuses installs a ValidatingAdmissionPolicy that makes the API
// server refuse, as Invalid, every exporter status in ns listing an endpoint
// of pod, and waits until the API server enforces it.
func (c *cluster) refuseStatuses(t *testing.T, ns, pod string) {
	t.Helper()
	name := "refuse-" + ns
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{jmxv1alpha1.SchemeGroupVersion.Group},
						APIVersions: []string{"*"}, Resources: []string{"prometheusjmxexporters/status"}}}}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("!has(object.status.metricsEndpoints) || !object.status.metricsEndpoints.exists(e, e.pod == '%s')", pod),
				Message:    "metricsEndpoints: Invalid value: the test refuses endpoints of pod " + pod,
			}},
		}}
	if _, err := c.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(c.ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}}}
	if _, err := c.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(c.ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = c.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = c.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
	})
	// A probe exporter, written with a dry run until the policy bites.
	c.createExporter(t, ns, "probe", map[string]string{"probe": "none"})
	waitUntil(t, 60*time.Second, "the policy is enforced", func() (bool, string) {
		ex := c.exporter(t, ns, "probe")
		ex.Status.MetricsEndpoints = []jmxv1alpha1.MetricsEndpoint{{Pod: pod, Container: "app", Port: 1, PodIP: "10.0.0.1", ContainerID: "x://y"}}
		_, err := c.jmx.JmxV1alpha1().PrometheusJmxExporters(ns).UpdateStatus(c.ctx, ex, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err), fmt.Sprintf("dry run: %v", err)
	})
}

// TestAStatusTheServerRefusesIsNeverSentAgain: the API server refuses the
// exporter's status as Invalid. The operator says so (log, Event, Degraded
// StatusRefused), writes the status without the refused list, and does not
// send the refused status again over many resyncs; a later, different
// status the server accepts is written in full.
func TestAStatusTheServerRefusesIsNeverSentAgain(t *testing.T) {
	c := newCluster(t, 4*time.Minute)
	ns := c.namespace(t, "invalid")
	c.refuseStatuses(t, ns, "refused")
	q := loadingStrategy()
	labels := map[string]string{"app": "orders"}
	c.createJVMPod(t, ns, "refused", labels, "containerd://r1")
	c.createJVMPod(t, ns, "fine", labels, "containerd://f1")
	c.runOperator(t, ns, operator.Options{Resync: 500 * time.Millisecond, BreakerWindow: time.Second,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: q.s}})
	c.createExporter(t, ns, "orders", labels)

	d := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonStatusRefused)
	if !strings.Contains(d.Message, "the test refuses endpoints of pod refused") || !strings.Contains(d.Message, "2 left out") {
		t.Errorf("Degraded message %q does not quote the server or count what was left out", d.Message)
	}
	ex := c.exporter(t, ns, "orders")
	if len(ex.Status.MetricsEndpoints) != 0 || ex.Status.InjectedPods != 2 {
		t.Errorf("reduced status: endpoints %+v, injected %d", ex.Status.MetricsEndpoints, ex.Status.InjectedPods)
	}
	waitUntil(t, 30*time.Second, "a StatusRefused Event", func() (bool, string) {
		return c.hasEvent(t, ns, "PrometheusJmxExporter", "orders", jmxv1alpha1.ReasonStatusRefused, "refused"), "no Event"
	})
	// Many resyncs later the refused status was sent once, and the stored
	// status has not changed.
	rv := ex.ResourceVersion
	hold(t, 5*time.Second, "the status is not rewritten", func() (bool, string) {
		got := c.exporter(t, ns, "orders")
		return got.ResourceVersion == rv, "resourceVersion " + got.ResourceVersion
	})
	if n := strings.Count(c.log.String(), "refused the status as invalid"); n != 1 {
		t.Errorf("the refused status was sent %d times, want once; log:\n%s", n, c.log.String())
	}
	// The refused pod goes: the next status differs and is accepted whole.
	if err := c.kube.CoreV1().Pods(ns).Delete(c.ctx, "refused", metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}); err != nil {
		t.Fatal(err)
	}
	c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionDegraded, metav1.ConditionFalse, jmxv1alpha1.ReasonAsExpected)
	if ex := c.exporter(t, ns, "orders"); len(ex.Status.MetricsEndpoints) != 1 || ex.Status.MetricsEndpoints[0].Pod != "fine" {
		t.Errorf("endpoints %+v, want fine's", ex.Status.MetricsEndpoints)
	}
}

func (c *cluster) annotate(t *testing.T, ns, pod string, ann map[string]any, labels map[string]any) {
	t.Helper()
	meta := map[string]any{}
	if ann != nil {
		meta["annotations"] = ann
	}
	if labels != nil {
		meta["labels"] = labels
	}
	patch, _ := json.Marshal(map[string]any{"metadata": meta})
	if _, err := c.kube.CoreV1().Pods(ns).Patch(c.ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// operatorAnnotations are the jmx.handlerkit.dev and prometheus.io
// annotations of a pod.
func operatorAnnotations(p *corev1.Pod) map[string]string {
	out := map[string]string{}
	for k, v := range p.Annotations {
		if strings.HasPrefix(k, "jmx.handlerkit.dev/") || strings.HasPrefix(k, "prometheus.io/") {
			out[k] = v
		}
	}
	return out
}

// TestPodsAreLeftAsTheOperatorFoundThem: a pod's own prometheus.io
// annotations are kept through injection, an operator restart and the
// exporter's deletion, and the exporter's status and Event say why the
// operator set none there; a pod that leaves the selector loses exactly the
// annotations the operator wrote and its record.
func TestPodsAreLeftAsTheOperatorFoundThem(t *testing.T) {
	c := newCluster(t, 4*time.Minute)
	ns := c.namespace(t, "leave")
	q := loadingStrategy()
	labels := map[string]string{"app": "orders"}
	c.createJVMPod(t, ns, "own", labels, "containerd://o1")
	c.createJVMPod(t, ns, "plain", labels, "containerd://p1")
	c.annotate(t, ns, "own", map[string]any{"prometheus.io/scrape": "true", "prometheus.io/port": "8080", "team": "shop"}, nil)
	c.annotate(t, ns, "plain", map[string]any{"team": "shop"}, nil)
	opts := operator.Options{BreakerWindow: time.Second,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: q.s}}
	stop := c.runOperator(t, ns, opts)
	c.createExporter(t, ns, "orders", labels)
	ready := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected)
	if !strings.Contains(ready.Message, "own (prometheus.io/port, prometheus.io/scrape)") {
		t.Errorf("Ready does not say which pod keeps its own annotations: %q", ready.Message)
	}
	waitUntil(t, 30*time.Second, "an Event on pod own", func() (bool, string) {
		return c.hasEvent(t, ns, "Pod", "own", "Injected", "has its own", "prometheus.io/port"), "no Event"
	})
	own := c.pod(t, ns, "own")
	if a := own.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "8080" || a["prometheus.io/path"] != "" ||
		a[operator.AnnotationPorts] != "9404" {
		t.Errorf("own: annotations %v", operatorAnnotations(own))
	}
	plain := c.pod(t, ns, "plain")
	if a := plain.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "9404" || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("plain: annotations %v", operatorAnnotations(plain))
	}

	// The pod leaves the selector: it loses what the operator wrote.
	c.annotate(t, ns, "plain", nil, map[string]any{"app": "elsewhere"})
	waitUntil(t, 60*time.Second, "plain loses the operator's annotations", func() (bool, string) {
		got := operatorAnnotations(c.pod(t, ns, "plain"))
		return len(got) == 0, fmt.Sprint(got)
	})
	if p := c.pod(t, ns, "plain"); p.Annotations["team"] != "shop" {
		t.Errorf("plain lost its own annotation: %v", p.Annotations)
	}
	waitUntil(t, 30*time.Second, "a LeftSelector Event", func() (bool, string) {
		return c.hasEvent(t, ns, "Pod", "plain", "LeftSelector", "plain"), "no Event"
	})

	// Across a restart, then the exporter's deletion: own keeps its own.
	stop()
	c.runOperator(t, ns, opts)
	c.passAgain(t, ns, "orders")
	if err := c.jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Delete(c.ctx, "orders", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 60*time.Second, "the exporter is gone", func() (bool, string) {
		_, err := c.jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Get(c.ctx, "orders", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	got := operatorAnnotations(c.pod(t, ns, "own"))
	if len(got) != 2 || got["prometheus.io/scrape"] != "true" || got["prometheus.io/port"] != "8080" {
		t.Errorf("own after the exporter's deletion: %v, want exactly its own two", got)
	}
}
