package e2e

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
)

// TestAJVMThatCannotStartWithTheAgentHarmsOnePodOnce: a Deployment of three
// replicas whose runtime was built with jlink without java.instrument (a
// JVM given a -javaagent ends before main), created after an exporter of
// mode AtStart. The first pod created gets the agent alone (the canary at
// start); its JVM ends at once; the circuit breaker opens naming that pod
// and the JVM's own last words; the pod is evicted and its ReplicaSet
// recreates it without the agent; the other pods are created without it. At
// the end three pods run and are ready, and only one pod ever had the agent.
// Before issue 40 every pod got the agent at once and crash-looped while the
// exporter stayed green.
func TestAJVMThatCannotStartWithTheAgentHarmsOnePodOnce(t *testing.T) {
	t.Parallel()
	needImage(t, testimages.JlinkJVMRef, testimages.BuildJlinkJVM)
	ctx := t.Context()
	op := deployAtStartOperator(t, "e2e-harm")
	ns := op.ns
	labels := map[string]string{"app": "jlinked"}
	createExporter(t, ns, exporter("jlinked", labels, withMode(jmxv1alpha1.InjectionModeAtStart)))
	waitWebhookInjects(t, ns, labels, "jlinked")

	// Every pod ever created, and whether it had the agent, from a watch.
	var mu sync.Mutex
	injected := map[string]bool{}
	w, err := kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=jlinked"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				_, has := p.Annotations[atstart.AnnotationInjected]
				mu.Lock()
				injected[p.Name] = injected[p.Name] || has
				mu.Unlock()
			}
		}
	}()

	pod := jvmPod("", labels, testimages.JlinkJVMRef)
	createDeployment(t, ns, "jlinked", labels, 3, pod)

	var harmed string
	waitFor(t, 3*time.Minute, "the circuit breaker open on the pod given the agent", func() (bool, string) {
		cb := getExporter(t, ns, "jlinked").Status.CircuitBreaker
		if cb == nil {
			return false, "no breaker"
		}
		harmed = cb.Pod
		return strings.Contains(cb.Message, "given the agent at start") && strings.Contains(cb.Message, "java.instrument"), fmt.Sprintf("%+v", cb)
	})
	mu.Lock()
	if !injected[harmed] {
		t.Errorf("the breaker names pod %s, which the watch never saw with the agent (%v)", harmed, injected)
	}
	mu.Unlock()
	waitCondition(t, ns, "jlinked", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonJVMEndedAfterInjection, time.Minute)
	waitFor(t, 2*time.Minute, "the harmed pod replaced", func() (bool, string) {
		evs := events(t, ns, "PrometheusJmxExporter", "jlinked")
		return hasEvent(evs, jmxv1alpha1.ReasonHarmedPodReplaced), fmt.Sprintf("%d events", len(evs))
	})
	waitFor(t, 3*time.Minute, "three pods running and ready, none with the agent", func() (bool, string) {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, "jlinked", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=jlinked"})
		if err != nil {
			return false, err.Error()
		}
		var live []string
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			if _, has := p.Annotations[atstart.AnnotationInjected]; has {
				return false, "pod " + p.Name + " has the agent"
			}
			live = append(live, p.Name)
		}
		return d.Status.ReadyReplicas == 3 && len(live) == 3, fmt.Sprintf("%d ready, pods %v", d.Status.ReadyReplicas, live)
	})
	mu.Lock()
	defer mu.Unlock()
	var given []string
	for name, has := range injected {
		if has {
			given = append(given, name)
		}
	}
	sort.Strings(given)
	if len(given) != 1 || given[0] != harmed {
		t.Errorf("pods ever given the agent: %v, want only %s (of %d pods seen)", given, harmed, len(injected))
	}
}
