package webhook_test

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/webhook"
)

// deliveryFixture is a fixture whose replica serves the at-start webhook with its Checker, as the operator's
// command does, for pods of every namespace of the fixture; the operator's identity may make the Checker's
// requests (atstart.PolicyRules) in podNS only.
func deliveryFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t, false)
	ctx := t.Context()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "atstart"}, Rules: atstart.PolicyRules()}
	if _, err := f.admin.RbacV1().Roles(f.podNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.RbacV1().RoleBindings(f.podNS).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "atstart"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: f.id, Name: "operator"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "atstart"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	checker, err := atstart.NewChecker(atstart.CheckerOptions{Client: f.operator, Logger: testLogger(t, "checker")})
	if err != nil {
		t.Fatal(err)
	}
	choose := func(context.Context, *corev1.Pod) (atstart.Input, bool, error) {
		return atstart.Input{Exporter: "demo", Port: 9404, Config: []byte("rules:\n- pattern: \".*\"\n"), Image: "agent:test",
			Delivery: atstart.DeliveryImageVolume}, true, nil
	}
	r := f.startReplica("a", f.certOptions(), map[string]webhook.Handler{"/mutate-pods": webhook.HandlerFunc(atstart.CheckedHandler(choose, checker))})
	f.installConfig(nil, hook{name: "pods.atstart.webhook.test", url: r.url("/mutate-pods"), resource: "pods"})
	return f
}

// policy denies, in ns, the pods for which expr is false, with a real ValidatingAdmissionPolicy and binding, and
// waits until the API server enforces it.
func (f *fixture) policy(ns, name, expr string) {
	f.t.Helper()
	ctx := f.t.Context()
	fail := admissionregistrationv1.Fail
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: f.id + "-" + name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: expr, Message: name}},
		},
	}
	if _, err := f.admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, vap, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: vap.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        vap.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}},
		},
	}
	if _, err := f.admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		ctx := context.Background()
		_ = f.admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, vap.Name, metav1.DeleteOptions{})
		_ = f.admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, vap.Name, metav1.DeleteOptions{})
	})
}

// denies waits until the API server refuses pod in ns by a dry run with the policy's message.
func (f *fixture) denies(ns, message string, pod *corev1.Pod) {
	f.t.Helper()
	waitFor(f.t, "the policy "+message+" enforced", func(ctx context.Context) (bool, error) {
		_, err := f.admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), message), nil
	})
}

// noImageVolumes is a policy's expression that denies image volumes.
const noImageVolumes = "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.image))"

// noJavaAgent is a policy's expression that denies containers whose JAVA_TOOL_OPTIONS loads an agent.
const noJavaAgent = "object.spec.containers.all(c, !has(c.env) || c.env.all(e, e.name != 'JAVA_TOOL_OPTIONS' || !has(e.value) || !e.value.contains('-javaagent')))"

func imageVolumePod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "app:v1", Env: []corev1.EnvVar{{Name: "JAVA_TOOL_OPTIONS", Value: "-javaagent:/x.jar"}}}},
			Volumes:    []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "agent:test"}}}},
		},
	}
}

// answered creates pods in ns until the webhook has answered for one (the API server trusts its CA once the
// manager wrote it): the pod carries the injected annotation or the webhook's notes.
func (f *fixture) answered(ns string) *corev1.Pod {
	f.t.Helper()
	var pod *corev1.Pod
	waitFor(f.t, "a pod the webhook answered for", func(ctx context.Context) (bool, error) {
		p, err := createPod(ctx, f.admin, ns)
		if err != nil {
			return false, err
		}
		pod = p
		return p.Annotations[atstart.AnnotationInjected] != "" || p.Annotations[atstart.AnnotationNotes] != "", nil
	})
	return pod
}

// In a namespace whose ValidatingAdmissionPolicy denies image volumes and whose LimitRange asks every container
// for at least 50m of CPU, the webhook's dry run of the image volume is refused and the init container, sized to
// the LimitRange, is admitted: the pod is created with the agent, and its notes say why the delivery fell back.
// On the code before the Checker the pod was refused outright.
func TestTheWebhookGivesTheDeliveryTheClusterAdmits(t *testing.T) {
	f := deliveryFixture(t)
	ctx := t.Context()
	if _, err := f.admin.CoreV1().LimitRanges(f.podNS).Create(ctx, &corev1.LimitRange{
		ObjectMeta: metav1.ObjectMeta{Name: "min-cpu"},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer,
			Min: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.policy(f.podNS, "no-image-volumes", noImageVolumes)
	f.denies(f.podNS, "no-image-volumes", imageVolumePod())

	pod := f.answered(f.podNS)
	for range 3 {
		rec, ok, err := atstart.ParseRecord(pod)
		if !ok || err != nil {
			t.Fatalf("pod %s not injected (%v): notes %q", pod.Name, err, pod.Annotations[atstart.AnnotationNotes])
		}
		if rec.Delivery != atstart.DeliveryInitContainer {
			t.Errorf("pod %s: delivery %s, want %s", pod.Name, rec.Delivery, atstart.DeliveryInitContainer)
		}
		if notes := pod.Annotations[atstart.AnnotationNotes]; !strings.Contains(notes, "delivery ImageVolume refused by the cluster") ||
			!strings.Contains(notes, "no-image-volumes") {
			t.Errorf("pod %s: notes %q, want the image volume's refusal", pod.Name, notes)
		}
		if len(pod.Spec.InitContainers) != 1 {
			t.Fatalf("pod %s: init containers %+v", pod.Name, pod.Spec.InitContainers)
		}
		if cpu := pod.Spec.InitContainers[0].Resources.Requests[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse("50m")) != 0 {
			t.Errorf("pod %s: init container requests cpu %s, want the LimitRange's min 50m", pod.Name, cpu.String())
		}
		// The next pods of the namespace: the refusal is remembered, the init container still checked.
		var err2 error
		if pod, err2 = createPod(ctx, f.admin, f.podNS); err2 != nil {
			t.Fatal(err2)
		}
	}
}

// When the cluster refuses every delivery (a policy that denies an agent in JAVA_TOOL_OPTIONS), the pod is created
// without the agent and its notes name the refusals; the Checker's dry run of the pod without the agent reaches
// this same webhook and is left alone (or the recursion would time the admission out and leave no note). In a
// namespace where the operator may not make dry runs the pod is created without the agent too, and says why.
func TestTheWebhookLeavesAPodTheClusterRefusesWithTheAgentAlone(t *testing.T) {
	f := deliveryFixture(t)
	f.policy(f.podNS, "no-java-agent", noJavaAgent)
	f.denies(f.podNS, "no-java-agent", imageVolumePod())

	pod := f.answered(f.podNS)
	if _, ok, _ := atstart.ParseRecord(pod); ok || len(pod.Spec.InitContainers) > 0 || len(pod.Spec.Volumes) > 0 {
		t.Errorf("pod %s injected: %+v", pod.Name, pod.Spec)
	}
	notes := pod.Annotations[atstart.AnnotationNotes]
	for _, want := range []string{"the cluster refuses the pod with the agent", "ImageVolume", "InitContainer", "no-java-agent"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q, want %q", notes, want)
		}
	}

	other := f.namespace(false)
	pod = f.answered(other)
	if _, ok, _ := atstart.ParseRecord(pod); ok {
		t.Errorf("pod %s injected without a dry run", pod.Name)
	}
	if notes := pod.Annotations[atstart.AnnotationNotes]; !strings.Contains(notes, "dry run forbidden") {
		t.Errorf("notes %q, want the forbidden dry run", notes)
	}
}
