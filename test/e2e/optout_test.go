package e2e

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
)

// The proofs of the owners' opt-out on the real node (issue 41): a pod or a
// namespace labelled jmx.handlerkit.dev/inject=false is left alone by live
// attach, reconfiguration and the webhook, under modes Attach and Both, with
// the operator running as deploy/operator's Deployment under the shipped
// RBAC (which grants get on namespaces for the namespace's label).

// optOutModes are the modes that attach to running JVMs.
var optOutModes = []jmxv1alpha1.InjectionMode{jmxv1alpha1.InjectionModeAttach, jmxv1alpha1.InjectionModeBoth}

// optOut labels the object (a pod in ns, or namespace ns when pod is "")
// with the opt-out.
func optOut(t *testing.T, ns, pod string) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, atstart.LabelOptOut, atstart.OptOutValue))
	var err error
	if pod == "" {
		_, err = kube.CoreV1().Namespaces().Patch(t.Context(), ns, types.MergePatchType, patch, metav1.PatchOptions{})
	} else {
		_, err = kube.CoreV1().Pods(ns).Patch(t.Context(), pod, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestOptOutIsHonouredOnTheNode: a pod labelled after it was injected is
// not injected again when its JVM restarts (the new JVM serves nothing), and
// its annotations stay as they were; in a namespace labelled before the
// exporters, nothing is attached or injected at start, and Ready says why.
// Each under modes Attach and Both.
func TestOptOutIsHonouredOnTheNode(t *testing.T) {
	t.Parallel()
	runTogether(t,
		subtest{"APodLabelledAfterInjection", podLabelledAfterInjection},
		subtest{"ANamespaceLabelledBefore", namespaceLabelledBefore},
	)
}

func podLabelledAfterInjection(t *testing.T) {
	op := deployAtStartOperator(t, "e2e-optout-pod")
	ns := op.ns
	for _, mode := range optOutModes {
		name := "jvm-" + strings.ToLower(string(mode))
		labels := map[string]string{"app": "optout-" + strings.ToLower(string(mode))}
		createPod(t, ns, jvmPod(name, labels, testimages.JVMAppRef))
		waitRunning(t, ns, name)
		createExporter(t, ns, exporter(name, labels, withMode(mode)))
	}
	type kept struct {
		annotations map[string]string
		ephemeral   int
		ip          string
	}
	before := map[string]kept{}
	for _, mode := range optOutModes {
		name := "jvm-" + strings.ToLower(string(mode))
		checkInjected(t, ns, name, name, jmxv1alpha1.DefaultPort)
		optOut(t, ns, name)
		_, pod := injectedRecord(t, ns, name)
		before[name] = kept{pod.Annotations, len(pod.Spec.EphemeralContainers), pod.Status.PodIP}
		restartContainer(t, ns, name)
	}
	// The new JVMs run without the agent, and stay so; the pods keep what
	// the operator wrote of their earlier starts.
	holds(t, 40*time.Second, "the opted-out pods left alone", func() (bool, string) {
		for name, k := range before {
			_, pod := injectedRecord(t, ns, name)
			if n := len(pod.Spec.EphemeralContainers); n != k.ephemeral {
				return false, fmt.Sprintf("pod %s: %d ephemeral containers, had %d", name, n, k.ephemeral)
			}
			if !maps.Equal(pod.Annotations, k.annotations) {
				return false, fmt.Sprintf("pod %s: annotations %v, were %v", name, pod.Annotations, k.annotations)
			}
			if body, err := scrape(k.ip, jmxv1alpha1.DefaultPort); err == nil {
				return false, fmt.Sprintf("pod %s: the restarted JVM serves metrics: %.200s", name, body)
			}
		}
		return true, ""
	})
	for name := range before {
		ex := waitCondition(t, ns, name, jmxv1alpha1.ConditionReady, metav1.ConditionFalse, jmxv1alpha1.ReasonOptedOut, time.Minute)
		if c := findCond(ex.Status.Conditions, jmxv1alpha1.ConditionReady); !strings.Contains(c.Message, name) {
			t.Errorf("exporter %s: Ready message %q does not name the pod", name, c.Message)
		}
	}
}

func namespaceLabelledBefore(t *testing.T) {
	op := deployAtStartOperator(t, "e2e-optout-ns")
	ns := op.ns
	optOut(t, ns, "")
	for _, mode := range optOutModes {
		name := "jvm-" + strings.ToLower(string(mode))
		labels := map[string]string{"app": "optout-" + strings.ToLower(string(mode))}
		createPod(t, ns, jvmPod(name, labels, testimages.JVMAppRef))
		waitRunning(t, ns, name)
		createExporter(t, ns, exporter(name, labels, withMode(mode)))
		// A pod created after the exporter: the webhook does not give it
		// the agent at start.
		createPod(t, ns, jvmPod(name+"-new", labels, testimages.JVMAppRef))
	}
	for _, mode := range optOutModes {
		name := "jvm-" + strings.ToLower(string(mode))
		ex := waitCondition(t, ns, name, jmxv1alpha1.ConditionReady, metav1.ConditionFalse, jmxv1alpha1.ReasonNamespaceOptedOut, 2*time.Minute)
		if c := findCond(ex.Status.Conditions, jmxv1alpha1.ConditionReady); !strings.Contains(c.Message, "namespace "+ns) {
			t.Errorf("exporter %s: Ready message %q does not name the namespace", name, c.Message)
		}
		waitRunning(t, ns, name+"-new")
	}
	holds(t, 30*time.Second, "nothing injected in the namespace", func() (bool, string) {
		pods, err := kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app in (optout-attach, optout-both)"})
		if err != nil {
			return false, err.Error()
		}
		if len(pods.Items) != 4 {
			return false, fmt.Sprintf("%d pods, want 4", len(pods.Items))
		}
		for _, p := range pods.Items {
			if len(p.Spec.EphemeralContainers) != 0 || len(p.Annotations) != 0 || len(p.Spec.Volumes) != len(jvmPodVolumes(p)) {
				return false, fmt.Sprintf("pod %s: %d ephemeral containers, annotations %v", p.Name, len(p.Spec.EphemeralContainers), p.Annotations)
			}
			if body, err := scrape(p.Status.PodIP, jmxv1alpha1.DefaultPort); err == nil {
				return false, fmt.Sprintf("pod %s serves metrics: %.200s", p.Name, body)
			}
		}
		return true, ""
	})
}

// jvmPodVolumes are the pod's volumes other than the agent's at start.
func jvmPodVolumes(p corev1.Pod) []corev1.Volume {
	var out []corev1.Volume
	for _, v := range p.Spec.Volumes {
		if v.Name != atstart.VolumeName {
			out = append(out, v)
		}
	}
	return out
}
