package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
)

// TestRestartOnRefusalNeverEmptiesAWorkload is issue 40's item 4 on the real
// node: a Deployment of three JVMs that refuse a live attach
// (-XX:+DisableAttachMechanism), an exporter in mode Both with
// restartOnRefusal, and a ValidatingAdmissionPolicy, as an administrator may
// have one, that denies pods whose JAVA_TOOL_OPTIONS loads an agent: the
// evicted pod's replacement can never be created with the agent. The ready
// replicas (ready pods not being deleted, sampled every half second for the
// whole test) never go below two; the operator stops with a reason
// (Degraded=True RestartOnRefusalStopped, status.restartOnRefusal.stopped, a
// Warning Event naming the evicted pod and its controller); and a restart of
// the operator while the eviction is under way, and another after the stop,
// change nothing: one eviction in all.
func TestRestartOnRefusalNeverEmptiesAWorkload(t *testing.T) {
	t.Parallel()
	op := deployAtStartOperator(t, "e2e-evict", withArgs("--replacement-wait=45s"))
	ns, ctx := op.ns, t.Context()
	denyAgentPods(t, ns)

	labels := map[string]string{"app": "noagent"}
	pod := jvmPod("", labels, testimages.JVMAppRef,
		javaOptions("-Xmx48m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:+DisableAttachMechanism"))
	createDeployment(t, ns, "noagent", labels, 3, pod)
	readyPods := func() (int, []string) {
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
			LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: labels})})
		if err != nil {
			return -1, []string{err.Error()}
		}
		n, states := 0, []string{}
		for _, p := range list.Items {
			ready := p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podIsReady(p.Status.Conditions)
			if ready {
				n++
			}
			states = append(states, fmt.Sprintf("%s ready=%v deleting=%v", p.Name, ready, p.DeletionTimestamp != nil))
		}
		return n, states
	}
	waitFor(t, 3*time.Minute, "three ready replicas", func() (bool, string) {
		n, states := readyPods()
		return n == 3, strings.Join(states, ", ")
	})

	// The sampler: the fewest ready replicas seen, and when.
	var mu sync.Mutex
	fewest, fewestAt, samples := 3, "", 0
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(500 * time.Millisecond):
			}
			n, states := readyPods()
			if n < 0 {
				continue // a failed List is no sample
			}
			mu.Lock()
			samples++
			if n < fewest {
				fewest, fewestAt = n, time.Now().UTC().Format(time.RFC3339)+": "+strings.Join(states, ", ")
			}
			mu.Unlock()
		}
	}()
	stopSampling := func() {
		close(done)
		wg.Wait()
	}
	defer func() {
		select {
		case <-done:
		default:
			stopSampling()
		}
	}()

	createExporter(t, ns, exporter("noagent", labels, withMode(jmxv1alpha1.InjectionModeBoth),
		func(ex *jmxv1alpha1.PrometheusJmxExporter) { ex.Spec.Injection.RestartOnRefusal = true }))
	evictions := func() []string {
		var out []string
		for _, e := range events(t, ns, "PrometheusJmxExporter", "noagent") {
			if e.Reason == jmxv1alpha1.ReasonEvictedOnRefusal {
				for i := int32(0); i < max(e.Count, 1); i++ {
					out = append(out, e.Message)
				}
			}
		}
		return out
	}
	var evicted jmxv1alpha1.Eviction
	replicaSet := regexp.MustCompile(`its ReplicaSet (noagent-[a-z0-9]+) `)
	waitFor(t, 4*time.Minute, "the first eviction, recorded in the exporter's status", func() (bool, string) {
		st := getExporter(t, ns, "noagent").Status.RestartOnRefusal
		evs := evictions()
		switch {
		case st == nil || len(evs) == 0:
		case st.Eviction != nil:
			evicted = *st.Eviction
			return true, ""
		case st.Stopped != nil && st.Stopped.Pod != "":
			// The replacement came at once, without the agent (the
			// webhook's dry run met the policy), and the operator stopped
			// before this poll saw the eviction under way.
			if m := replicaSet.FindStringSubmatch(evs[0]); m != nil {
				evicted.Pod, evicted.Controller.Kind, evicted.Controller.Name = st.Stopped.Pod, "ReplicaSet", m[1]
				return true, ""
			}
		}
		return false, fmt.Sprintf("status.restartOnRefusal %+v, evictions %q", st, evs)
	})
	if evicted.Controller.Kind != "ReplicaSet" || !strings.HasPrefix(evicted.Controller.Name, "noagent-") {
		t.Errorf("eviction %+v, want a pod of the Deployment's ReplicaSet", evicted)
	}

	// The operator restarts while the evicted pod has no replacement.
	restartOperator(t, ns)

	ex := waitCondition(t, ns, "noagent", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonRestartOnRefusalStopped, 4*time.Minute)
	deg := findCond(ex.Status.Conditions, jmxv1alpha1.ConditionDegraded)
	for _, w := range []string{"pod " + evicted.Pod, "ReplicaSet " + evicted.Controller.Name, "no more pods are evicted until the exporter's spec changes"} {
		if !strings.Contains(deg.Message, w) {
			t.Errorf("Degraded message %q lacks %q", deg.Message, w)
		}
	}
	stop := ex.Status.RestartOnRefusal
	if stop == nil || stop.Stopped == nil || stop.Stopped.Pod != evicted.Pod || stop.Stopped.Generation != ex.Generation ||
		stop.Stopped.Reason != jmxv1alpha1.RestartStopReplacementMissing && stop.Stopped.Reason != jmxv1alpha1.RestartStopReplacementNotInjected {
		t.Fatalf("status.restartOnRefusal %+v, want stopped for pod %s (ReplacementMissing, or ReplacementNotInjected when the "+
			"ReplicaSet created it while the operator's webhook was restarting)", stop, evicted.Pod)
	}
	t.Logf("stopped: %s: %s", stop.Stopped.Reason, stop.Stopped.Message)
	waitFor(t, time.Minute, "the stop's Warning Event", func() (bool, string) {
		for _, e := range events(t, ns, "PrometheusJmxExporter", "noagent") {
			if e.Reason == jmxv1alpha1.ReasonRestartOnRefusalStopped && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "pod "+evicted.Pod) {
				return true, ""
			}
		}
		return false, "none"
	})

	// Nothing more is evicted, not after another restart either.
	oneEviction := func() (bool, string) {
		evs := evictions()
		return len(evs) == 1, fmt.Sprintf("%d evictions: %q", len(evs), evs)
	}
	holds(t, 20*time.Second, "one eviction", oneEviction)
	restartOperator(t, ns)
	holds(t, 30*time.Second, "one eviction after the operator's restart", oneEviction)
	if c := findCond(getExporter(t, ns, "noagent").Status.Conditions, jmxv1alpha1.ConditionDegraded); c.Reason != jmxv1alpha1.ReasonRestartOnRefusalStopped {
		t.Errorf("Degraded after the restart: %s %s: %s", c.Status, c.Reason, c.Message)
	}

	stopSampling()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d samples of the ready replicas; fewest %d", samples, fewest)
	if fewest < 2 {
		t.Errorf("ready replicas went down to %d (%s)", fewest, fewestAt)
	}
	if samples < 10 {
		t.Errorf("only %d samples of the ready replicas", samples)
	}
}

// podIsReady says whether the pod's Ready condition is True.
func podIsReady(cs []corev1.PodCondition) bool {
	for _, c := range cs {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// denyAgentPods creates a ValidatingAdmissionPolicy and its binding, limited
// to ns, that deny the creation of pods whose JAVA_TOOL_OPTIONS loads an agent
// (-javaagent), as an administrator's policy may, and waits until the API
// server enforces it (a server-side dry run of such a pod is denied).
func denyAgentPods(t *testing.T, ns string) {
	t.Helper()
	ctx := t.Context()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-deny-javaagent"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "object.spec.containers.all(c, !has(c.env) || c.env.all(e, e.name != 'JAVA_TOOL_OPTIONS' || !has(e.value) || !e.value.contains('-javaagent')))",
				Message:    "pods may not load a Java agent through JAVA_TOOL_OPTIONS here",
			}},
		},
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}},
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_ = kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(bg, binding.Name, metav1.DeleteOptions{})
		_ = kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(bg, policy.Name, metav1.DeleteOptions{})
	})
	probe := jvmPod("probe", map[string]string{"probe": "deny-javaagent"}, testimages.JVMAppRef, javaOptions("-javaagent:/nowhere.jar"))
	waitFor(t, time.Minute, "the policy enforced", func() (bool, string) {
		_, err := kube.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return false, "a pod with -javaagent was admitted"
		}
		return strings.Contains(err.Error(), "may not load a Java agent"), err.Error()
	})
}

// restartOperator deletes the operator's pods at once, as a node failure
// would, and waits until a new one is ready.
func restartOperator(t *testing.T, ns string) {
	t.Helper()
	ctx := t.Context()
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + operatorName}
	old, err := kube.CoreV1().Pods(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	gone := map[string]bool{}
	for _, p := range old.Items {
		gone[p.Name] = true
		if err := kube.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 3*time.Minute, "a new operator pod, ready", func() (bool, string) {
		list, err := kube.CoreV1().Pods(ns).List(ctx, sel)
		if err != nil {
			return false, err.Error()
		}
		for _, p := range list.Items {
			if !gone[p.Name] && p.DeletionTimestamp == nil && podIsReady(p.Status.Conditions) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods", len(list.Items))
	})
}
