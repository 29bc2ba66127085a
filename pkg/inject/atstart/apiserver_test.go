package atstart

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// restrictedPod is a pod that Pod Security's restricted profile admits, with the given containers.
func restrictedPod(cs ...corev1.Container) *corev1.Pod {
	no, yes, uid := false, true, int64(1000)
	for i := range cs {
		cs[i].SecurityContext = &corev1.SecurityContext{
			AllowPrivilegeEscalation: &no,
			RunAsNonRoot:             &yes,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
	}
	p := newPod(cs...)
	p.Name = ""
	p.GenerateName = "app-"
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid}
	return p
}

// The patch is only worth something if the API server takes the pod it makes: a real kube-apiserver (v1.36.3)
// validates every mutated pod, in a namespace that enforces Pod Security's restricted profile and in one that
// enforces nothing.
func TestMutatedPodsPassTheAPIServersValidation(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := env.Clientset()
	plain, err := env.CreateNamespace(ctx, "atstart")
	if err != nil {
		t.Fatal(err)
	}
	restricted, err := env.CreateNamespace(ctx, "atstart-restricted")
	if err != nil {
		t.Fatal(err)
	}
	nsObj, err := cs.CoreV1().Namespaces().Get(ctx, restricted, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Labels = map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}
	if _, err := cs.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	withUserOptions := container("app", corev1.EnvVar{Name: JavaToolOptions, Value: "-Dfoo=bar"})
	withUserOptions.Ports = []corev1.ContainerPort{{ContainerPort: 9404}}
	for _, d := range []Delivery{DeliveryImageVolume, DeliveryInitContainer} {
		for _, n := range []struct{ name, ns string }{{"unrestricted", plain}, {"restricted", restricted}} {
			ns := n.ns
			t.Run(string(d)+"/"+n.name, func(t *testing.T) {
				pod := restrictedPod(withUserOptions, container("sidecar"))
				pod.Spec.InitContainers = []corev1.Container{restrictedPod(container("migrate")).Spec.Containers[0]}
				pod.Spec.InitContainers[0].Name = "migrate"
				in := testInput()
				in.Delivery = d
				mutated, res := mutate(t, pod, in)
				if len(res.Injected) != 2 {
					t.Fatalf("injected = %+v, notes %q", res.Injected, res.Notes)
				}
				mutated.Namespace = ns
				created, err := cs.CoreV1().Pods(ns).Create(ctx, mutated, metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("the API server refused the mutated pod: %v", err)
				}
				t.Cleanup(func() {
					_ = cs.CoreV1().Pods(ns).Delete(context.Background(), created.Name, metav1.DeleteOptions{})
				})
				if _, ok, err := ParseRecord(created); !ok || err != nil {
					t.Errorf("stored pod has no record: %v", err)
				}
				// What the API server stored is injected: a new Mutate of it changes nothing.
				if again, err := Mutate(created, in); err != nil || len(again.Patch) != 0 {
					t.Errorf("Mutate of the stored pod = %+v, %v", again, err)
				}
			})
		}
	}
	// A pod on the host's network: the downward-API variable that names the pod's IP, before the user's
	// JAVA_TOOL_OPTIONS, is valid.
	t.Run("hostNetwork", func(t *testing.T) {
		pod := newPod(withUserOptions)
		pod.Spec.HostNetwork = true
		mutated, res := mutate(t, pod, testInput())
		if len(res.Injected) != 1 {
			t.Fatalf("injected = %+v, notes %q", res.Injected, res.Notes)
		}
		mutated.Namespace = plain
		created, err := cs.CoreV1().Pods(plain).Create(ctx, mutated, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the API server refused the mutated pod: %v", err)
		}
		t.Cleanup(func() {
			_ = cs.CoreV1().Pods(plain).Delete(context.Background(), created.Name, metav1.DeleteOptions{})
		})
		if e := created.Spec.Containers[0].Env; len(e) < 2 || e[0].Name != HostEnv || e[0].ValueFrom == nil ||
			e[0].ValueFrom.FieldRef.FieldPath != "status.podIP" || e[1].Name != JavaToolOptions {
			t.Errorf("stored env = %+v", e)
		}
	})
}
