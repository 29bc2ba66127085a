package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
	"github.com/handlerkit/handlerkit/pkg/images"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
)

// mirrorAgentRef is the agent image loaded under a second name: an image an
// administrator allowed (--allowed-agent-images) besides the operator's own.
const mirrorAgentRef = "localhost/handlerkit/jmx-agent-mirror:v1"

// mirrorAgent is the outcome of loading the mirror's image, once per test
// binary: the tests that use it run in parallel.
var mirrorAgent struct {
	once sync.Once
	err  error
}

// loadMirrorAgent loads the agent image that the suite built under
// mirrorAgentRef too, once per test binary.
func loadMirrorAgent(t *testing.T) {
	t.Helper()
	mirrorAgent.once.Do(func() {
		mirrorAgent.err = func() error {
			if agentArchive == "" {
				return errors.New("the suite built no agent image")
			}
			img, err := tarball.ImageFromPath(agentArchive, nil)
			if err != nil {
				return err
			}
			dir, err := os.MkdirTemp("", "handlerkit-e2e-mirror-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			file := filepath.Join(dir, "jmx-agent-mirror.tar")
			if err := images.WriteDockerArchive(file, mirrorAgentRef, img); err != nil {
				return err
			}
			return env.LoadImageArchive(context.Background(), file)
		}()
	})
	if mirrorAgent.err != nil {
		t.Fatalf("the mirror's agent image: %v", mirrorAgent.err)
	}
}

// exporterCreator returns a client that acts as user, who may only create
// and get exporters and get pods in ns (a namespace user an administrator
// gave exporters, nothing more).
func exporterCreator(t *testing.T, ns, user string) versioned.Interface {
	t.Helper()
	ctx := t.Context()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "exporter-creator"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{jmxv1alpha1.SchemeGroupVersion.Group}, Resources: []string{"prometheusjmxexporters"}, Verbs: []string{"create", "get"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
	}}
	if _, err := kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "exporter-creator"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The RBAC cache may take a moment: the user's first create is retried
	// until it is authorized (by the caller, createAs).
	return client
}

// createAs creates ex as the user behind client, retrying while the new
// RoleBinding is not yet in force.
func createAs(t *testing.T, client versioned.Interface, ns string, ex *jmxv1alpha1.PrometheusJmxExporter) {
	t.Helper()
	waitFor(t, time.Minute, "the user creates exporter "+ex.Name, func() (bool, string) {
		_, err := client.JmxV1alpha1().PrometheusJmxExporters(ns).Create(t.Context(), ex.DeepCopy(), metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return true, ""
		}
		if apierrors.IsForbidden(err) {
			return false, err.Error()
		}
		t.Fatalf("create %s: %v", ex.Name, err)
		return false, ""
	})
}

// nextPass changes the exporter's spec (as an administrator) and waits until
// the operator has written the status of the new generation: a full pass of
// the operator after the one that set the condition, with no sleep.
func nextPass(t *testing.T, ns, name string) *jmxv1alpha1.PrometheusJmxExporter {
	t.Helper()
	var gen int64
	waitFor(t, time.Minute, "a new generation of "+name, func() (bool, string) {
		ex := getExporter(t, ns, name)
		ex.Spec.Port++
		got, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Update(t.Context(), ex, metav1.UpdateOptions{})
		if err != nil {
			return false, err.Error()
		}
		gen = got.Generation
		return true, ""
	})
	var ex *jmxv1alpha1.PrometheusJmxExporter
	waitFor(t, 3*time.Minute, name+" observes its new generation", func() (bool, string) {
		ex = getExporter(t, ns, name)
		return ex.Status.ObservedGeneration == gen, fmt.Sprintf("observed %d, want %d", ex.Status.ObservedGeneration, gen)
	})
	return ex
}

func podAnnotations(t *testing.T, ns, name string) (map[string]string, *corev1.Pod) {
	t.Helper()
	p, err := kube.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range p.Annotations {
		if strings.HasPrefix(k, "jmx.handlerkit.dev/") || strings.HasPrefix(k, "prometheus.io/") {
			out[k] = v
		}
	}
	return out, p
}

// TestAnExporterNeverLendsTheOperatorsPower is issue 23's proof on the real
// node. In a namespace that enforces Pod Security baseline, a user who may
// only create and get exporters and get pods:
//   - asks for an image off the allowlist, a custom agent path, a custom
//     attach helper path: each exporter gets Degraded=True with its reason,
//     and the selected pod gets no ephemeral container and no annotation,
//     through a later pass of the operator too;
//   - asks for an image the administrator allowed (the agent image under a
//     second name): it is used, with the operator's paths;
//
// and the pods are left as the operator found them: a pod's own
// prometheus.io annotations stay through injection and the exporter's
// deletion, and a pod whose labels leave the selector loses the operator's
// annotations and record.
func TestAnExporterNeverLendsTheOperatorsPower(t *testing.T) {
	t.Parallel()
	loadMirrorAgent(t)
	ns := newNamespace(t, "e2e-trust", map[string]string{"pod-security.kubernetes.io/enforce": "baseline"})
	deployOperator(t, ns, withArgs("--allowed-agent-images="+mirrorAgentRef))
	alice := exporterCreator(t, ns, "alice")

	victim := map[string]string{"app": "victim"}
	orders := map[string]string{"app": "orders"}
	createPod(t, ns, jvmPod("victim", victim, testimages.JVMAppRef))
	// The pods to inject run as a known non-root user, for which the
	// ephemeral container drops every capability and so is within baseline
	// whatever pkg/inject decides for root JVMs (isolation_test.go proves
	// those).
	own := jvmPod("own", orders, testimages.JVMAppRef, asUser(1000, 1000))
	own.Annotations = map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "8080", "team": "shop"}
	createPod(t, ns, own)
	createPod(t, ns, jvmPod("leaver", orders, testimages.JVMAppRef, asUser(1000, 1000)))
	for _, p := range []string{"victim", "own", "leaver"} {
		waitRunning(t, ns, p)
	}

	refused := []struct {
		name, reason, word string
		agent              jmxv1alpha1.Agent
	}{
		{"image", jmxv1alpha1.ReasonAgentImageNotAllowed, "busybox:latest", jmxv1alpha1.Agent{Image: "busybox:latest"}},
		{"path", jmxv1alpha1.ReasonAgentPathNotAllowed, "spec.agent.path", jmxv1alpha1.Agent{Path: "/bin/sh"}},
		{"helper", jmxv1alpha1.ReasonAgentPathNotAllowed, "spec.agent.attachHelperPath", jmxv1alpha1.Agent{AttachHelperPath: "/bin/sh"}},
	}
	for _, r := range refused {
		agent := r.agent
		createAs(t, alice, ns, exporter(r.name, victim, func(ex *jmxv1alpha1.PrometheusJmxExporter) { ex.Spec.Agent = &agent }))
	}
	createAs(t, alice, ns, exporter("mirror", orders, func(ex *jmxv1alpha1.PrometheusJmxExporter) {
		ex.Spec.Agent = &jmxv1alpha1.Agent{Image: mirrorAgentRef}
	}))

	for _, r := range refused {
		ex := waitCondition(t, ns, r.name, jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, r.reason, 3*time.Minute)
		for _, c := range ex.Status.Conditions {
			if c.Type == jmxv1alpha1.ConditionDegraded && !strings.Contains(c.Message, r.word) {
				t.Errorf("%s: Degraded message %q does not name %q", r.name, c.Message, r.word)
			}
		}
		waitCondition(t, ns, r.name, jmxv1alpha1.ConditionReady, metav1.ConditionFalse, r.reason, time.Minute)
		waitFor(t, time.Minute, r.name+"'s Warning Event", func() (bool, string) {
			return hasEvent(events(t, ns, "PrometheusJmxExporter", r.name), r.reason), "none yet"
		})
		// The operator's next pass refuses it again and touches nothing.
		ex = nextPass(t, ns, r.name)
		for _, c := range ex.Status.Conditions {
			if c.Type == jmxv1alpha1.ConditionDegraded && (c.Status != metav1.ConditionTrue || c.Reason != r.reason) {
				t.Errorf("%s after a pass: Degraded %s %s", r.name, c.Status, c.Reason)
			}
		}
		ann, pod := podAnnotations(t, ns, "victim")
		if len(pod.Spec.EphemeralContainers) != 0 || len(ann) != 0 {
			t.Fatalf("%s: the victim pod got ephemeral containers %+v and annotations %v", r.name, pod.Spec.EphemeralContainers, ann)
		}
	}

	// The allowlisted image runs, with the operator's paths.
	ex := waitCondition(t, ns, "mirror", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected, 4*time.Minute)
	if len(ex.Status.MetricsEndpoints) != 2 {
		t.Errorf("mirror: endpoints %+v, want one per pod", ex.Status.MetricsEndpoints)
	}
	for _, name := range []string{"own", "leaver"} {
		_, pod := podAnnotations(t, ns, name)
		if len(pod.Spec.EphemeralContainers) == 0 {
			t.Fatalf("%s: no ephemeral container", name)
		}
		for _, ec := range pod.Spec.EphemeralContainers {
			if ec.Image != mirrorAgentRef || len(ec.Command) == 0 || ec.Command[0] != jmxv1alpha1.DefaultAttachHelperPath {
				t.Errorf("%s: ephemeral container image %s command %q, want the allowlisted image and the operator's helper", name, ec.Image, ec.Command)
			}
		}
	}
	// own keeps its own prometheus.io annotations; the operator set none.
	ann, _ := podAnnotations(t, ns, "own")
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != "8080" || ann["prometheus.io/path"] != "" ||
		ann["jmx.handlerkit.dev/ports"] == "" {
		t.Errorf("own after injection: %v", ann)
	}
	if !strings.Contains(ex.Status.Conditions[condIndex(ex, jmxv1alpha1.ConditionReady)].Message, "own (prometheus.io/port, prometheus.io/scrape)") {
		t.Errorf("Ready does not say why own has no operator scrape annotations: %+v", ex.Status.Conditions)
	}
	ann, _ = podAnnotations(t, ns, "leaver")
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" || ann["jmx.handlerkit.dev/agents"] == "" {
		t.Errorf("leaver after injection: %v", ann)
	}

	// leaver leaves the selector: it loses exactly the operator's annotations.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{"app": "gone"}}})
	if _, err := kube.CoreV1().Pods(ns).Patch(t.Context(), "leaver", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "leaver loses the operator's annotations", func() (bool, string) {
		ann, _ := podAnnotations(t, ns, "leaver")
		return len(ann) == 0, fmt.Sprint(ann)
	})

	// The exporter goes: own keeps exactly its own.
	if err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Delete(t.Context(), "mirror", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the exporter is gone", func() (bool, string) {
		_, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Get(t.Context(), "mirror", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	ann, pod := podAnnotations(t, ns, "own")
	if len(ann) != 2 || ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != "8080" || pod.Annotations["team"] != "shop" {
		t.Errorf("own after the exporter's deletion: %v, want exactly its own annotations", pod.Annotations)
	}
}

func condIndex(ex *jmxv1alpha1.PrometheusJmxExporter, typ string) int {
	for i, c := range ex.Status.Conditions {
		if c.Type == typ {
			return i
		}
	}
	return 0
}
