package manifest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestBuildTheLocalOverlay(t *testing.T) {
	objs, err := Build(filepath.Join("..", "..", "deploy", "overlays", "local"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		kinds[o.GetKind()] = o
	}
	for _, k := range []string{"CustomResourceDefinition", "ServiceAccount", "Role", "RoleBinding", "Deployment"} {
		if kinds[k] == nil {
			t.Fatalf("no %s in %d objects", k, len(objs))
		}
	}
	if ns := kinds["CustomResourceDefinition"].GetNamespace(); ns != "" {
		t.Errorf("the CRD got namespace %q", ns)
	}
	for _, k := range []string{"ServiceAccount", "Role", "RoleBinding", "Deployment"} {
		if ns := kinds[k].GetNamespace(); ns != "handlerkit-demo" {
			t.Errorf("%s in namespace %q, want handlerkit-demo", k, ns)
		}
	}
	subjects, _, _ := unstructured.NestedSlice(kinds["RoleBinding"].Object, "subjects")
	if subjects[0].(map[string]any)["namespace"] != "handlerkit-demo" {
		t.Errorf("binding subject %v", subjects[0])
	}
	containers, _, _ := unstructured.NestedSlice(kinds["Deployment"].Object, "spec", "template", "spec", "containers")
	if img := containers[0].(map[string]any)["image"]; img != "ghcr.io/handlerkit/jmx-agent:v0.2.0" {
		t.Errorf("image %v", img)
	}
}

func TestBuildRefusesWhatItDoesNotUnderstand(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("resources: []\npatches:\n- target: {kind: Deployment}\n  patch: '[]'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(dir); err == nil {
		t.Fatal("a kustomization with a targeted (JSON 6902) patch was accepted and its patch ignored")
	}
}

func TestImageOverride(t *testing.T) {
	objs, err := Decode([]byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  template:
    spec:
      containers:
      - {name: a, image: "example.test/x/op:v1"}
      - {name: b, image: other}
`))
	if err != nil {
		t.Fatal(err)
	}
	replaceImage(objs[0], "example.test/x/op", "mirror.test/op", "v2")
	cs, _, _ := unstructured.NestedSlice(objs[0].Object, "spec", "template", "spec", "containers")
	if cs[0].(map[string]any)["image"] != "mirror.test/op:v2" || cs[1].(map[string]any)["image"] != "other" {
		t.Errorf("containers %v", cs)
	}
	if _, err := Decode([]byte("metadata: {name: x}\n")); err == nil {
		t.Error("a document without kind was accepted")
	}
}

// TestBuildSetsClusterRoleBindingSubjectsAsKustomizeDoes: kustomize's
// namespace reaches a ClusterRoleBinding's ServiceAccount subject when it
// names no namespace, or the one a ServiceAccount of that name among the
// objects had (so an overlay's namespace reaches a subject its base set, as
// `kubectl kustomize` 5 does); any other explicit one is left alone.
func TestBuildSetsClusterRoleBindingSubjectsAsKustomizeDoes(t *testing.T) {
	objs, err := Build(filepath.Join("..", "..", "deploy", "operator", "cluster-wide"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range objs {
		if o.GetKind() != "ClusterRoleBinding" {
			continue
		}
		n++
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		if ns := subjects[0].(map[string]any)["namespace"]; ns != "handlerkit-system" {
			t.Errorf("%s: subject namespace %v, want handlerkit-system", o.GetName(), ns)
		}
	}
	if n == 0 {
		t.Fatal("no ClusterRoleBinding in deploy/operator/cluster-wide")
	}
	explicit, err := Decode([]byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: b}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: r}
subjects:
- {kind: ServiceAccount, name: sa, namespace: kept}
`))
	if err != nil {
		t.Fatal(err)
	}
	setSubjectNamespaces(explicit[0], "other", map[string]string{"sa": "base"})
	subjects, _, _ := unstructured.NestedSlice(explicit[0].Object, "subjects")
	if ns := subjects[0].(map[string]any)["namespace"]; ns != "kept" {
		t.Errorf("an explicit ClusterRoleBinding subject namespace became %v", ns)
	}
	setSubjectNamespaces(explicit[0], "other", map[string]string{"sa": "kept"})
	if subjects, _, _ = unstructured.NestedSlice(explicit[0].Object, "subjects"); subjects[0].(map[string]any)["namespace"] != "other" {
		t.Errorf("the subject of a ServiceAccount moved from its namespace stayed: %v", subjects[0])
	}
	// An overlay's namespace reaches the ClusterRoleBindings of its base.
	objs, err = Build(filepath.Join("..", "..", "deploy", "overlays", "local"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "ClusterRoleBinding" {
			continue
		}
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		if ns := subjects[0].(map[string]any)["namespace"]; ns != "handlerkit-demo" {
			t.Errorf("deploy/overlays/local %s: subject namespace %v, want handlerkit-demo", o.GetName(), ns)
		}
	}
}

// TestTheNamespaceReachesTheWebhookConfigurationAsKustomizeDoes: with
// deploy/operator's configurations (kustomizeconfig.yaml), the namespace of
// the kustomization, and of an overlay above it, reaches the webhook's
// Service reference and the one namespace it selects, as `kubectl kustomize`
// writes them; the configuration itself is cluster-scoped. Without a
// configuration nothing but metadata.namespace changes.
func TestTheNamespaceReachesTheWebhookConfigurationAsKustomizeDoes(t *testing.T) {
	for dir, ns := range map[string]string{"operator": "handlerkit-system", "overlays/local": "handlerkit-demo"} {
		objs, err := Build(filepath.Join("..", "..", "deploy", dir))
		if err != nil {
			t.Fatal(err)
		}
		var mwc *unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() == "MutatingWebhookConfiguration" {
				mwc = o
			}
		}
		if mwc == nil {
			t.Fatalf("%s: no MutatingWebhookConfiguration", dir)
		}
		if mwc.GetNamespace() != "" {
			t.Errorf("%s: the MutatingWebhookConfiguration got namespace %q", dir, mwc.GetNamespace())
		}
		hooks, _, _ := unstructured.NestedSlice(mwc.Object, "webhooks")
		hook := hooks[0].(map[string]any)
		if got, _, _ := unstructured.NestedString(hook, "clientConfig", "service", "namespace"); got != ns {
			t.Errorf("%s: service namespace %q, want %q", dir, got, ns)
		}
		if got, _, _ := unstructured.NestedString(hook, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name"); got != ns {
			t.Errorf("%s: selected namespace %q, want %q", dir, got, ns)
		}
	}

	if got := splitPath(`webhooks/namespaceSelector/matchLabels/kubernetes.io\/metadata.name`); len(got) != 4 || got[3] != "kubernetes.io/metadata.name" {
		t.Errorf("splitPath: %q", got)
	}
	obj := map[string]any{"webhooks": []any{map[string]any{"name": "a"}, map[string]any{"name": "b", "clientConfig": map[string]any{}}}}
	setField(obj, splitPath("webhooks/clientConfig/service/namespace"), "ns", false)
	if hooks := obj["webhooks"].([]any); hooks[0].(map[string]any)["clientConfig"] != nil {
		t.Errorf("without create a missing field was added: %v", hooks[0])
	}
	setField(obj, splitPath("webhooks/clientConfig/service/namespace"), "ns", true)
	for _, h := range obj["webhooks"].([]any) {
		if got, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "namespace"); got != "ns" {
			t.Errorf("with create: %v", h)
		}
	}
}

// TestPatchesMergeAsKustomizeDoes: a strategic-merge patch by path merges into
// its target as kustomize merges it: lists by their merge keys (a container
// by name, an env entry by name), other
// fields kept. A patch that matches nothing, or of a kind without known merge
// keys, is an error.
func TestPatchesMergeAsKustomizeDoes(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"kustomization.yaml": "resources: [d.yaml]\npatches:\n- path: p.yaml\n",
		"d.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  template:
    spec:
      containers:
      - name: a
        image: x
        env:
        - {name: ONE, value: "1"}
        - {name: TWO, value: "2"}
      - name: b
        image: y
`,
		"p.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  template:
    spec:
      containers:
      - name: a
        env:
        - {name: TWO, value: "two"}
        - {name: THREE, value: "3"}
`,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	containers, _, _ := unstructured.NestedSlice(objs[0].Object, "spec", "template", "spec", "containers")
	if len(containers) != 2 || containers[1].(map[string]any)["name"] != "b" || containers[0].(map[string]any)["image"] != "x" {
		t.Fatalf("containers %v", containers)
	}
	var env []string
	for _, e := range containers[0].(map[string]any)["env"].([]any) {
		env = append(env, fmt.Sprint(e.(map[string]any)["name"], "=", e.(map[string]any)["value"]))
	}
	// kustomize 5 writes the patch's entries first (TWO, THREE, ONE); the
	// order is not compared (applyPatchFile).
	slices.Sort(env)
	if want := []string{"ONE=1", "THREE=3", "TWO=two"}; !slices.Equal(env, want) {
		t.Errorf("env %v, want %v (kustomize's merge)", env, want)
	}

	for name, patch := range map[string]string{
		"no target":    "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: other}\n",
		"unknown kind": "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: d}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(patch), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Build(dir); err == nil {
			t.Errorf("%s: the patch was accepted", name)
		}
	}
}
