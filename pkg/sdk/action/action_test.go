package action_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

var shared = testenv.Shared{
	Setup: func(ctx context.Context, env *testenv.Environment) error {
		return env.InstallCRDs(ctx, gadgetCRD())
	},
}

func sharedEnv(t testing.TB) *testenv.Environment {
	t.Helper()
	return shared.Get(t)
}

func TestMain(m *testing.M) {
	os.Exit(shared.Main(m))
}

const group = "action.handlerkit.dev"

func gadgetCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve,
				}},
			}},
		},
	}
}

type fixture struct {
	env *testenv.Environment
	w   *action.Writer
	op  *sdk.Operator
	ns  string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	env := sharedEnv(t)
	ns, err := env.CreateNamespace(context.Background(), "action-")
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	op, err := sdk.New(env.Config(), sdk.WithRegisterer(prometheus.NewRegistry()), sdk.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{env: env, w: action.For(op), op: op, ns: ns}
}

func gadget(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(group + "/v1")
	u.SetKind("Gadget")
	u.SetNamespace(ns)
	u.SetName(name)
	_ = unstructured.SetNestedField(u.Object, int64(1), "spec", "size")
	return u
}

func TestCreateUpdateAndUpdateStatusWriteTheReplyBack(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c"}, Data: map[string]string{"k": "1"}}
	if err := f.w.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if cm.UID == "" || cm.ResourceVersion == "" || cm.CreationTimestamp.IsZero() {
		t.Fatalf("created object lacks server fields: uid=%q rv=%q", cm.UID, cm.ResourceVersion)
	}
	if cm.Kind != "ConfigMap" || cm.APIVersion != "v1" {
		t.Errorf("created object kind = %q %q", cm.APIVersion, cm.Kind)
	}
	rv := cm.ResourceVersion
	stale := cm.DeepCopy()
	cm.Data["k"] = "2"
	if err := f.w.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if cm.ResourceVersion == rv {
		t.Error("Update did not write the new resourceVersion back")
	}
	stale.Data["k"] = "lost"
	if err := f.w.Update(ctx, stale); !apierrors.IsConflict(err) {
		t.Errorf("Update with a stale resourceVersion = %v, want a conflict", err)
	}

	g := gadget(f.ns, "g")
	if err := f.w.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	if g.GetUID() == "" {
		t.Fatal("created gadget has no uid")
	}
	_ = unstructured.SetNestedField(g.Object, "Ready", "status", "phase")
	if err := f.w.UpdateStatus(ctx, g); err != nil {
		t.Fatal(err)
	}
	if phase, _, _ := unstructured.NestedString(g.Object, "status", "phase"); phase != "Ready" {
		t.Errorf("status after UpdateStatus = %q, want Ready", phase)
	}
	live, err := f.op.DynamicClient().Resource(gadgetGVR()).Namespace(f.ns).Get(ctx, "g", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if phase, _, _ := unstructured.NestedString(live.Object, "status", "phase"); phase != "Ready" {
		t.Errorf("stored status = %q, want Ready", phase)
	}
}

func TestPatchKindsWriteTheReplyBack(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	cases := []struct {
		name string
		pt   action.PatchType
		data string
		opts []action.Option
		want string
	}{
		{"merge", action.MergePatch, `{"data":{"k":"merge"}}`, nil, "merge"},
		{"json", action.JSONPatch, `[{"op":"replace","path":"/data/k","value":"json"}]`, nil, "json"},
		{"strategic", action.StrategicMergePatch, `{"data":{"k":"strategic"}}`, nil, "strategic"},
		{"apply", action.ApplyPatch, `{"apiVersion":"v1","kind":"ConfigMap","data":{"k":"apply"}}`, []action.Option{action.WithFieldManager("test"), action.Force()}, "apply"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "p-" + c.name}, Data: map[string]string{"k": "orig"}}
			if err := f.w.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
			target := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: cm.Name}}
			if err := f.w.Patch(ctx, target, c.pt, []byte(c.data), c.opts...); err != nil {
				t.Fatal(err)
			}
			if target.Data["k"] != c.want || target.UID != cm.UID {
				t.Errorf("after %s patch: data %v uid %q, want k=%s and uid %q", c.name, target.Data, target.UID, c.want, cm.UID)
			}
		})
	}
}

// TestPatchWithSubresourceWritesOnlyTheStatus patches the status
// subresource of a custom resource with each patch type, as a handler
// reporting what it observed does: the status changes, the spec and
// generation do not, and the reply comes back into the object.
func TestPatchWithSubresourceWritesOnlyTheStatus(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	cases := []struct {
		name string
		pt   action.PatchType
		data string
		opts []action.Option
	}{
		{"merge", action.MergePatch, `{"spec":{"size":9},"status":{"phase":"Ready"}}`, nil},
		{"json", action.JSONPatch, `[{"op":"add","path":"/status","value":{"phase":"Ready"}},{"op":"replace","path":"/spec/size","value":9}]`, nil},
		{"apply", action.ApplyPatch, `{"apiVersion":"` + group + `/v1","kind":"Gadget","spec":{"size":9},"status":{"phase":"Ready"}}`, []action.Option{action.WithFieldManager("status-writer")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := gadget(f.ns, "status-"+c.name)
			if err := f.w.Create(ctx, g); err != nil {
				t.Fatal(err)
			}
			target := gadget(f.ns, g.GetName())
			opts := append([]action.Option{action.WithSubresource("status")}, c.opts...)
			if err := f.w.Patch(ctx, target, c.pt, []byte(c.data), opts...); err != nil {
				t.Fatal(err)
			}
			live, err := f.op.DynamicClient().Resource(gadgetGVR()).Namespace(f.ns).Get(ctx, g.GetName(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for label, u := range map[string]*unstructured.Unstructured{"written back": target, "stored": live} {
				phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
				size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
				if phase != "Ready" || size != 1 || u.GetGeneration() != 1 || u.GetUID() != g.GetUID() {
					t.Errorf("%s: phase %q, size %d, generation %d, uid %q; want Ready, 1 (the spec is not the status's), 1, %q",
						label, phase, size, u.GetGeneration(), u.GetUID(), g.GetUID())
				}
			}
		})
	}

	// Without WithSubresource, the same merge patch changes the spec only.
	g := gadget(f.ns, "main-resource")
	if err := f.w.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := f.w.Patch(ctx, g, action.MergePatch, []byte(cases[0].data)); err != nil {
		t.Fatal(err)
	}
	phase, _, _ := unstructured.NestedString(g.Object, "status", "phase")
	size, _, _ := unstructured.NestedInt64(g.Object, "spec", "size")
	if phase != "" || size != 9 {
		t.Errorf("patch of the main resource: phase %q size %d, want no status and size 9", phase, size)
	}

	if err := f.w.Patch(ctx, gadget(f.ns, "main-resource"), action.MergePatch, []byte(`{"status":{}}`), action.WithSubresource("scale")); !apierrors.IsNotFound(err) {
		t.Errorf("patch of a subresource the kind lacks = %v, want NotFound", err)
	}
	for verb, write := range map[string]func() error{
		"Create":       func() error { return f.w.Create(ctx, gadget(f.ns, "refused"), action.WithSubresource("status")) },
		"Update":       func() error { return f.w.Update(ctx, g, action.WithSubresource("status")) },
		"UpdateStatus": func() error { return f.w.UpdateStatus(ctx, g, action.WithSubresource("status")) },
		"Delete":       func() error { return f.w.Delete(ctx, g, action.WithSubresource("status")) },
	} {
		if err := write(); err == nil || !strings.Contains(err.Error(), "applies only to Patch") {
			t.Errorf("%s with WithSubresource = %v, want an error saying it applies only to Patch", verb, err)
		}
	}
}

func TestApplyWithoutDataAppliesTheObject(t *testing.T) {
	f := newFixture(t)
	g := gadget(f.ns, "applied")
	if err := f.w.Patch(context.Background(), g, action.ApplyPatch, nil); err != nil {
		t.Fatal(err)
	}
	if g.GetUID() == "" || g.GetResourceVersion() == "" {
		t.Fatal("apply did not write the created object back")
	}
	found := false
	for _, mf := range g.GetManagedFields() {
		found = found || (mf.Manager == action.DefaultFieldManager && mf.Operation == metav1.ManagedFieldsOperationApply)
	}
	if !found {
		t.Errorf("managedFields %v lack an Apply entry by %q", g.GetManagedFields(), action.DefaultFieldManager)
	}
}

func TestDeleteWritesAFinalizingObjectBack(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "held", Finalizers: []string{"handlerkit.dev/test"}}}
	if err := f.w.Create(ctx, held); err != nil {
		t.Fatal(err)
	}
	if err := f.w.Delete(ctx, held); err != nil {
		t.Fatal(err)
	}
	if held.DeletionTimestamp == nil {
		t.Error("Delete of a finalized object did not write its deletionTimestamp back")
	}
	held.Finalizers = nil
	if err := f.w.Update(ctx, held); err != nil {
		t.Fatal(err)
	}

	plain := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "plain"}}
	if err := f.w.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if err := f.w.Delete(ctx, plain, action.WithPropagationPolicy(metav1.DeletePropagationBackground), action.WithPreconditions(plain.UID, "")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Get(ctx, "plain", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("object after Delete: %v, want NotFound", err)
	}
	if err := f.w.Delete(ctx, plain); !apierrors.IsNotFound(err) {
		t.Errorf("second Delete = %v, want NotFound", err)
	}
}

func TestDryRunPersistsNothing(t *testing.T) {
	f := newFixture(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "dry"}}
	if err := f.w.Create(context.Background(), cm, action.DryRun()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Get(context.Background(), "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("dry-run object exists: %v", err)
	}
}

func TestPackageFunctionsUseTheDefaultOperator(t *testing.T) {
	f := newFixture(t)
	sdk.SetDefault(f.op)
	t.Cleanup(func() { sdk.SetDefault(nil) })
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "d"}, Data: map[string]string{"k": "v"}}
	ctx := context.Background()
	if err := action.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["k"] = "w"
	if err := action.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := action.Patch(ctx, cm, action.MergePatch, []byte(`{"data":{"k":"x"}}`)); err != nil || cm.Data["k"] != "x" {
		t.Fatalf("Patch = %v, data %v", err, cm.Data)
	}
	if err := action.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
}

// TestBadInputIsAClearErrorNeverAPanic calls every verb with every kind of
// bad object.
func TestBadInputIsAClearErrorNeverAPanic(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var typedNil *corev1.ConfigMap
	noKind := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "x", "namespace": f.ns}}}
	unknown := &unstructured.Unstructured{}
	unknown.SetAPIVersion("nothing.handlerkit.dev/v1")
	unknown.SetKind("Nope")
	unknown.SetNamespace(f.ns)
	unknown.SetName("x")
	noNamespace := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
	noName := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns}}
	verbs := map[string]func(runtime.Object) error{
		"create":        func(o runtime.Object) error { return f.w.Create(ctx, o) },
		"update":        func(o runtime.Object) error { return f.w.Update(ctx, o) },
		"update status": func(o runtime.Object) error { return f.w.UpdateStatus(ctx, o) },
		"patch":         func(o runtime.Object) error { return f.w.Patch(ctx, o, action.MergePatch, []byte(`{}`)) },
		"apply":         func(o runtime.Object) error { return f.w.Patch(ctx, o, action.ApplyPatch, nil) },
		"delete":        func(o runtime.Object) error { return f.w.Delete(ctx, o) },
	}
	objects := []struct {
		name string
		obj  runtime.Object
		want string
	}{
		{"nil", nil, "object is nil"},
		{"typed nil", typedNil, "object is nil"},
		{"missing kind", noKind, "set apiVersion and kind"},
		{"unknown kind", unknown, "does not serve kind"},
		{"missing namespace", noNamespace, "metadata.namespace is empty"},
	}
	for verb, call := range verbs {
		for _, o := range objects {
			t.Run(verb+"/"+o.name, func(t *testing.T) {
				err := call(o.obj)
				if err == nil || !strings.Contains(err.Error(), o.want) {
					t.Fatalf("got %v, want an error containing %q", err, o.want)
				}
			})
		}
		if verb != "create" {
			t.Run(verb+"/missing name", func(t *testing.T) {
				if err := call(noName); err == nil || !strings.Contains(err.Error(), "metadata.name is empty") {
					t.Fatalf("got %v, want a missing-name error", err)
				}
			})
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "x"}}
	patchCases := []struct {
		name string
		call func() error
		want string
	}{
		{"create without name", func() error { return f.w.Create(ctx, noName) }, "generateName are empty"},
		{"unknown patch type", func() error { return f.w.Patch(ctx, cm, "application/x-nope", []byte(`{}`)) }, "unsupported patch type"},
		{"empty merge patch", func() error { return f.w.Patch(ctx, cm, action.MergePatch, nil) }, "empty"},
		{"force on merge", func() error { return f.w.Patch(ctx, cm, action.MergePatch, []byte(`{}`), action.Force()) }, "server-side apply"},
		{"nil writer", func() error { var w *action.Writer; return w.Create(ctx, cm) }, "nil Writer"},
	}
	for _, c := range patchCases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func gadgetGVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: "v1", Resource: "gadgets"}
}
