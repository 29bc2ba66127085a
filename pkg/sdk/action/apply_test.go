package action_test

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk/action"
)

// claimedFields returns the leaf paths of the fields manager owns in the
// stored object, for example "f:spec.f:replicas".
func claimedFields(t *testing.T, f *fixture, name, manager string) []string {
	t.Helper()
	d, err := f.env.Clientset().AppsV1().Deployments(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range d.ManagedFields {
		if mf.Manager != manager || mf.FieldsV1 == nil {
			continue
		}
		var tree map[string]any
		if err := json.Unmarshal(mf.FieldsV1.Raw, &tree); err != nil {
			t.Fatal(err)
		}
		var paths []string
		var walk func(prefix string, node map[string]any)
		walk = func(prefix string, node map[string]any) {
			for k, v := range node {
				if k == "." {
					continue
				}
				child, _ := v.(map[string]any)
				p := strings.TrimPrefix(prefix+"."+k, ".")
				if len(child) == 0 || (len(child) == 1 && child["."] != nil) {
					paths = append(paths, p)
					continue
				}
				walk(p, child)
			}
		}
		walk("", tree)
		sort.Strings(paths)
		return paths
	}
	t.Fatalf("no managedFields entry of %q on %s", manager, name)
	return nil
}

var appLabels = map[string]string{"app": "web"}

// The fields a partial apply of the Deployment below claims, and no more.
var wantClaims = []string{
	`f:spec.f:selector`,
	`f:spec.f:template.f:metadata.f:labels.f:app`,
	`f:spec.f:template.f:spec.f:containers.k:{"name":"app"}.f:image`,
	`f:spec.f:template.f:spec.f:containers.k:{"name":"app"}.f:name`,
}

// An apply configuration from k8s.io/client-go/applyconfigurations holds
// only the fields that were set, so sending it as the apply patch claims
// exactly those fields.
func TestApplyConfigurationClaimsOnlyTheFieldsSet(t *testing.T) {
	f := newFixture(t)
	cfg := appsv1ac.Deployment("from-config", f.ns).WithSpec(appsv1ac.DeploymentSpec().
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(appLabels)).
		WithTemplate(corev1ac.PodTemplateSpec().WithLabels(appLabels).
			WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("app").WithImage("busybox")))))
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	into := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "from-config"}}
	if err := f.w.Patch(context.Background(), into, action.ApplyPatch, data, action.WithFieldManager("partial")); err != nil {
		t.Fatal(err)
	}
	if into.UID == "" || into.Spec.Template.Spec.Containers[0].Image != "busybox" {
		t.Errorf("the applied object was not written back: %+v", into.Spec.Template.Spec.Containers)
	}
	if got := claimedFields(t, f, "from-config", "partial"); strings.Join(got, "\n") != strings.Join(wantClaims, "\n") {
		t.Errorf("claimed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantClaims, "\n"))
	}
}

// A partial unstructured object applied with nil data claims only what it
// holds.
func TestPartialUnstructuredApplyClaimsOnlyItsFields(t *testing.T) {
	f := newFixture(t)
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "app", "image": "busybox"}}},
			},
		},
	}}
	u.SetAPIVersion("apps/v1")
	u.SetKind("Deployment")
	u.SetNamespace(f.ns)
	u.SetName("from-unstructured")
	if err := f.w.Patch(context.Background(), u, action.ApplyPatch, nil, action.WithFieldManager("partial")); err != nil {
		t.Fatal(err)
	}
	if got := claimedFields(t, f, "from-unstructured", "partial"); strings.Join(got, "\n") != strings.Join(wantClaims, "\n") {
		t.Errorf("claimed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantClaims, "\n"))
	}
}

// A typed object cannot tell an unset field from a zero one, so applying
// it claims more than the caller set: this is why the docs point to apply
// configurations and partial unstructured objects.
func TestTypedApplyClaimsZeroValuedFields(t *testing.T) {
	f := newFixture(t)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "typed"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: appLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: appLabels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
			},
		},
	}
	if err := f.w.Patch(context.Background(), d, action.ApplyPatch, nil, action.WithFieldManager("typed")); err != nil {
		t.Fatal(err)
	}
	got := claimedFields(t, f, "typed", "typed")
	t.Logf("a typed apply claims\n%s", strings.Join(got, "\n"))
	if !strings.Contains(strings.Join(got, "\n"), "f:spec.f:strategy") {
		t.Errorf("typed apply claimed only %v; the docs say it claims zero-valued fields such as spec.strategy too", got)
	}
}
