package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
)

// TestAtStartDeliveryTheClusterAdmits (issue 40, "never a delivery the cluster cannot run"): in a namespace where
// a ValidatingAdmissionPolicy denies image volumes and a LimitRange asks every container for at least 50m of CPU,
// an AtStart exporter and a Deployment of the test JVM: every pod is still created and runs, and gets the agent
// through the delivery the cluster admits. The webhook's dry run of the image volume (the operator's default) is
// refused, so it falls back to the init container, sized to the LimitRange's min; the pod's notes and the
// exporter's Ready message say so. Before the dry run the webhook returned the image volume, the API server
// refused every pod, and the Deployment had none.
func TestAtStartDeliveryTheClusterAdmits(t *testing.T) {
	t.Parallel()
	op := deployAtStartOperator(t, "e2e-delivery")
	ns, ctx := op.ns, t.Context()
	if _, err := kube.CoreV1().LimitRanges(ns).Create(ctx, &corev1.LimitRange{
		ObjectMeta: metav1.ObjectMeta{Name: "min-cpu"},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer,
			Min: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	denyImageVolumes(t, ns)

	labels := map[string]string{"app": "delivered"}
	createExporter(t, ns, exporter("delivered", labels, withMode(jmxv1alpha1.InjectionModeAtStart)))
	waitWebhookInjects(t, ns, labels, "delivered")
	pod := jvmPod("", labels, testimages.JVMAppRef)
	createDeployment(t, ns, "delivered", labels, 1, pod)
	// The first pod tries the exporter's change alone (issue 40, item 1);
	// once its JVM has served for the breaker window, the second pod gets
	// the agent too.
	waitFor(t, 3*time.Minute, "the change proven on the first pod", func() (bool, string) {
		ex := getExporter(t, ns, "delivered")
		return ex.Status.Proven != nil && ex.Status.Proven.Generation == ex.Generation, fmt.Sprintf("proven %+v", ex.Status.Proven)
	})
	scale := []byte(`{"spec":{"replicas":2}}`)
	if _, err := kube.AppsV1().Deployments(ns).Patch(ctx, "delivered", types.MergePatchType, scale, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Minute, "both replicas of the Deployment ready", func() (bool, string) {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, "delivered", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.ReadyReplicas == 2, fmt.Sprintf("ready %d, conditions %+v", d.Status.ReadyReplicas, d.Status.Conditions)
	})
	list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=delivered"})
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		rec := atStartRecord(t, &p)
		if rec.Delivery != atstart.DeliveryInitContainer {
			t.Errorf("pod %s: delivery %s, want %s", p.Name, rec.Delivery, atstart.DeliveryInitContainer)
		}
		if notes := p.Annotations[atstart.AnnotationNotes]; !strings.Contains(notes, "delivery ImageVolume refused by the cluster") {
			t.Errorf("pod %s: notes %q, want the image volume's refusal", p.Name, notes)
		}
		for _, ic := range p.Spec.InitContainers {
			if ic.Name == atstart.InitContainerName {
				if cpu := ic.Resources.Requests[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse("50m")) != 0 {
					t.Errorf("pod %s: init container requests cpu %s, want the LimitRange's min 50m", p.Name, cpu.String())
				}
			}
		}
		running := waitRunning(t, ns, p.Name)
		waitScrape(t, running.Status.PodIP, rec.Port, heapMetric)
		served++
	}
	if served != 2 {
		t.Errorf("%d pods served metrics, want 2", served)
	}
	// Ready was True already for the first pod: wait until it counts both.
	waitFor(t, 3*time.Minute, "Ready naming both pods' delivery and the fallback", func() (bool, string) {
		c := findCond(getExporter(t, ns, "delivered").Status.Conditions, jmxv1alpha1.ConditionReady)
		ok := c.Status == metav1.ConditionTrue && c.Reason == jmxv1alpha1.ReasonAllInjected
		for _, w := range []string{"by InitContainer 2", "fell back from ImageVolume"} {
			ok = ok && strings.Contains(c.Message, w)
		}
		return ok, fmt.Sprintf("%s/%s %q", c.Status, c.Reason, c.Message)
	})
}

// denyImageVolumes installs a ValidatingAdmissionPolicy and its binding that deny, in ns, pods with an image
// volume (as an admin may have), removed with the test, and waits until the API server enforces it.
func denyImageVolumes(t *testing.T, ns string) {
	t.Helper()
	ctx := t.Context()
	name := "e2e-no-image-volumes-" + ns
	fail := admissionregistrationv1.Fail
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				}}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.image))",
				Message:    "image volumes are not allowed here"}},
		},
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, vap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
		},
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "policy-probe-", Labels: map[string]string{"jmx.handlerkit.dev/inject": "false"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: testimages.JVMAppRef}},
			Volumes:    []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: testimages.JVMAppRef}}}},
		},
	}
	waitFor(t, time.Minute, "the policy "+name+" enforced", func() (bool, string) {
		_, err := kube.CoreV1().Pods(ns).Create(ctx, probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return false, "a pod with an image volume admitted"
		}
		return strings.Contains(err.Error(), "image volumes are not allowed here"), err.Error()
	})
}
