package sdktest_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// TestContract runs every case against a real kube-apiserver through
// query.For and action.For, then against an sdktest.Client, and requires
// the same observations from both. Each case also asserts the outcome it
// expects, so that the two cannot agree on a wrong answer unnoticed.
func TestContract(t *testing.T) {
	for _, c := range contractCases {
		t.Run(c.name, func(t *testing.T) {
			real := &run{t: t, b: realBackend(t)}
			c.fn(real)
			mem := &run{t: t, b: memoryBackend(t)}
			c.fn(mem)
			if got, want := strings.Join(mem.seen, "\n"), strings.Join(real.seen, "\n"); got != want {
				t.Errorf("sdktest observed\n%s\n\nthe API server observed\n%s", got, want)
			}
		})
	}
}

// run records what a case observes on one backend.
type run struct {
	t    *testing.T
	b    backend
	seen []string
}

var ctx = context.Background()

// see records an observation.
func (r *run) see(label string, value any) {
	r.seen = append(r.seen, fmt.Sprintf("%s: %v", label, value))
}

// want records an observation and fails the test unless it is want.
func (r *run) want(label string, got, want any) {
	r.t.Helper()
	r.see(label, got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		r.t.Errorf("%s: %s = %v, want %v", r.b.name, label, got, want)
	}
}

// must fails the test now on an error that the case does not expect.
func (r *run) must(label string, err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatalf("%s: %s: %v", r.b.name, label, err)
	}
}

// outcome names the kind of an error, the part of it the contract covers.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case apierrors.IsNotFound(err):
		return "NotFound"
	case apierrors.IsAlreadyExists(err):
		return "AlreadyExists"
	case apierrors.IsConflict(err):
		return "Conflict"
	case apierrors.IsInvalid(err):
		return "Invalid"
	case apierrors.IsBadRequest(err):
		return "BadRequest"
	case apierrors.IsUnsupportedMediaType(err):
		return "UnsupportedMediaType"
	case errors.Is(err, context.Canceled):
		return "Canceled"
	case apierrors.ReasonForError(err) != metav1.StatusReasonUnknown:
		return string(apierrors.ReasonForError(err))
	}
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &status):
		return fmt.Sprintf("status %d", status.Status().Code)
	default:
		return "client-side error"
	}
}

func configMap(ns, name string, labels map[string]string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: data}
}

func deployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
			},
		},
	}
}

func gadget(ns, name string, size int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"size": size}}}
	u.SetAPIVersion(gadgetGroup + "/v1")
	u.SetKind("Gadget")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func names(list runtime.Object) string {
	var out []string
	switch l := list.(type) {
	case *corev1.ConfigMapList:
		for _, i := range l.Items {
			out = append(out, i.Name)
		}
	case *unstructured.UnstructuredList:
		for _, i := range l.Items {
			out = append(out, i.GetName())
		}
	case *rbacv1.ClusterRoleList:
		for _, i := range l.Items {
			out = append(out, strings.SplitN(i.Name, ".", 2)[0])
		}
	}
	return strings.Join(out, ",")
}

var contractCases = []struct {
	name string
	fn   func(r *run)
}{
	{"MissingObjectsAreNotFound", func(r *run) {
		cm := configMap(r.b.ns, "missing", nil, map[string]string{"k": "v"})
		r.want("get", outcome(r.b.r.Get(ctx, cm.DeepCopy())), "NotFound")
		r.want("update", outcome(r.b.w.Update(ctx, cm.DeepCopy())), "NotFound")
		r.want("merge patch", outcome(r.b.w.Patch(ctx, cm.DeepCopy(), action.MergePatch, []byte(`{"data":{"k":"w"}}`))), "NotFound")
		r.want("delete", outcome(r.b.w.Delete(ctx, cm.DeepCopy())), "NotFound")
		d := deployment(r.b.ns, "missing", 1)
		r.want("update status", outcome(r.b.w.UpdateStatus(ctx, d)), "NotFound")
		r.want("get gadget", outcome(r.b.r.Get(ctx, gadget(r.b.ns, "missing", 1))), "NotFound")
	}},
	{"CreateFillsInTheServersFieldsAndRefusesADuplicate", func(r *run) {
		cm := configMap(r.b.ns, "created", nil, map[string]string{"k": "v"})
		r.must("create", r.b.w.Create(ctx, cm))
		r.want("uid set", cm.UID != "", true)
		r.want("resourceVersion set", cm.ResourceVersion != "", true)
		r.want("creationTimestamp set", !cm.CreationTimestamp.IsZero(), true)
		r.want("kind", cm.APIVersion+" "+cm.Kind, "v1 ConfigMap")
		r.see("configmap generation", cm.Generation)
		r.want("create again", outcome(r.b.w.Create(ctx, configMap(r.b.ns, "created", nil, nil))), "AlreadyExists")
		withRV := configMap(r.b.ns, "with-rv", nil, nil)
		withRV.ResourceVersion = cm.ResourceVersion
		r.want("create with a resourceVersion", outcome(r.b.w.Create(ctx, withRV)), "status 500")

		generated := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.b.ns, GenerateName: "gen-"}}
		r.must("create from generateName", r.b.w.Create(ctx, generated))
		r.want("generated name", strings.HasPrefix(generated.Name, "gen-") && len(generated.Name) == len("gen-")+5, true)

		d := deployment(r.b.ns, "created", 2)
		d.Status.Replicas = 7
		r.must("create deployment", r.b.w.Create(ctx, d))
		r.want("deployment generation", d.Generation, 1)
		r.want("deployment status on create", d.Status.Replicas, 0)

		g := gadget(r.b.ns, "created", 1)
		_ = unstructured.SetNestedField(g.Object, "ready", "status", "phase")
		r.must("create gadget", r.b.w.Create(ctx, g))
		r.want("gadget generation", g.GetGeneration(), 1)
		_, hasStatus := g.Object["status"]
		r.want("gadget status on create", hasStatus, false)
	}},
	{"ObjectsAreCopiedInAndOut", func(r *run) {
		cm := configMap(r.b.ns, "copied", map[string]string{"l": "1"}, map[string]string{"k": "v"})
		r.must("create", r.b.w.Create(ctx, cm))
		cm.Data["k"] = "changed after create"
		cm.Labels["l"] = "changed"
		got := configMap(r.b.ns, "copied", nil, nil)
		r.must("get", r.b.r.Get(ctx, got))
		r.want("after mutating the created object", got.Data["k"]+" "+got.Labels["l"], "v 1")
		got.Data["k"] = "changed after get"
		again := configMap(r.b.ns, "copied", nil, nil)
		r.must("get again", r.b.r.Get(ctx, again))
		r.want("after mutating what Get returned", again.Data["k"], "v")
		var list corev1.ConfigMapList
		r.must("list", r.b.r.List(ctx, r.b.ns, &list))
		for i := range list.Items {
			list.Items[i].Data["k"] = "changed after list"
		}
		r.must("get after list", r.b.r.Get(ctx, again))
		r.want("after mutating what List returned", again.Data["k"], "v")
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		u.SetNamespace(r.b.ns)
		u.SetName("copied")
		r.must("unstructured get", r.b.r.Get(ctx, u))
		_ = unstructured.SetNestedField(u.Object, "changed in unstructured", "data", "k")
		r.must("get after unstructured", r.b.r.Get(ctx, again))
		r.want("after mutating an unstructured read", again.Data["k"], "v")
	}},
	{"StaleResourceVersionIsAConflict", func(r *run) {
		cm := configMap(r.b.ns, "stale", nil, map[string]string{"k": "1"})
		r.must("create", r.b.w.Create(ctx, cm))
		stale := cm.DeepCopy()
		cm.Data["k"] = "2"
		r.want("update", outcome(r.b.w.Update(ctx, cm)), "ok")
		r.want("resourceVersion moved", cm.ResourceVersion != stale.ResourceVersion, true)
		stale.Data["k"] = "lost"
		r.want("update with the stale resourceVersion", outcome(r.b.w.Update(ctx, stale)), "Conflict")
		patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"data":{"k":"lost"}}`, stale.ResourceVersion)
		r.want("merge patch with the stale resourceVersion", outcome(r.b.w.Patch(ctx, stale.DeepCopy(), action.MergePatch, []byte(patch))), "Conflict")
		jsonPatch := fmt.Sprintf(`[{"op":"replace","path":"/metadata/resourceVersion","value":%q},{"op":"replace","path":"/data/k","value":"lost"}]`, stale.ResourceVersion)
		r.want("JSON patch with the stale resourceVersion", outcome(r.b.w.Patch(ctx, stale.DeepCopy(), action.JSONPatch, []byte(jsonPatch))), "Conflict")
		got := configMap(r.b.ns, "stale", nil, nil)
		r.must("get", r.b.r.Get(ctx, got))
		r.want("stored after the conflicts", got.Data["k"], "2")

		unconditional := configMap(r.b.ns, "stale", nil, map[string]string{"k": "3"})
		r.want("update of a built-in kind without resourceVersion", outcome(r.b.w.Update(ctx, unconditional)), "ok")
		other := configMap(r.b.ns, "stale", nil, map[string]string{"k": "4"})
		other.UID = "0c5a6f6e-0000-4000-8000-000000000000"
		r.want("update carrying another uid", outcome(r.b.w.Update(ctx, other)), "Conflict")

		d := deployment(r.b.ns, "stale", 1)
		r.must("create deployment", r.b.w.Create(ctx, d))
		staleD := d.DeepCopy()
		d.Status.Replicas = 1
		r.must("update status", r.b.w.UpdateStatus(ctx, d))
		staleD.Status.Replicas = 5
		r.want("update status with the stale resourceVersion", outcome(r.b.w.UpdateStatus(ctx, staleD)), "Conflict")
	}},
	{"AWriteThatChangesNothingKeepsTheResourceVersion", func(r *run) {
		cm := configMap(r.b.ns, "same", nil, map[string]string{"k": "v"})
		r.must("create", r.b.w.Create(ctx, cm))
		rv := cm.ResourceVersion
		r.must("update", r.b.w.Update(ctx, cm))
		r.want("resourceVersion unchanged by an identical update", cm.ResourceVersion == rv, true)
		r.must("patch", r.b.w.Patch(ctx, cm, action.MergePatch, []byte(`{"data":{"k":"v"}}`)))
		r.want("resourceVersion unchanged by an empty patch", cm.ResourceVersion == rv, true)
	}},
	{"Patches", func(r *run) {
		cm := configMap(r.b.ns, "patched", map[string]string{"a": "1"}, map[string]string{"k": "v", "drop": "x"})
		r.must("create", r.b.w.Create(ctx, cm))
		r.must("merge patch", r.b.w.Patch(ctx, cm, action.MergePatch, []byte(`{"data":{"k":"merged","drop":null}}`)))
		r.want("after the merge patch", fmt.Sprint(cm.Data), "map[k:merged]")
		r.must("JSON patch", r.b.w.Patch(ctx, cm, action.JSONPatch, []byte(`[{"op":"test","path":"/data/k","value":"merged"},{"op":"add","path":"/data/j","value":"added"}]`)))
		r.want("after the JSON patch", fmt.Sprint(cm.Data), "map[j:added k:merged]")
		r.want("JSON patch whose test fails", outcome(r.b.w.Patch(ctx, cm.DeepCopy(), action.JSONPatch, []byte(`[{"op":"test","path":"/data/k","value":"other"}]`))), "Invalid")
		r.must("strategic merge patch", r.b.w.Patch(ctx, cm, action.StrategicMergePatch, []byte(`{"metadata":{"labels":{"b":"2"}}}`)))
		r.want("labels after the strategic merge patch", fmt.Sprint(cm.Labels), "map[a:1 b:2]")

		d := deployment(r.b.ns, "patched", 1)
		r.must("create deployment", r.b.w.Create(ctx, d))
		r.must("strategic merge of a container", r.b.w.Patch(ctx, d, action.StrategicMergePatch,
			[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","env":[{"name":"E","value":"1"}]}]}}}}`)))
		c := d.Spec.Template.Spec.Containers
		r.want("containers merged by name", fmt.Sprintf("%d %s %d", len(c), c[0].Image, len(c[0].Env)), "1 busybox 1")
		r.want("deployment generation after a spec patch", d.Generation, 2)
		r.must("merge patch of status through the main resource", r.b.w.Patch(ctx, d, action.MergePatch, []byte(`{"status":{"replicas":9}}`)))
		r.want("status after a main-resource patch", d.Status.Replicas, 0)

		g := gadget(r.b.ns, "patched", 1)
		r.must("create gadget", r.b.w.Create(ctx, g))
		r.want("strategic merge patch of a custom resource", outcome(r.b.w.Patch(ctx, g.DeepCopy(), action.StrategicMergePatch, []byte(`{"spec":{"size":2}}`))), "UnsupportedMediaType")
		r.must("merge patch of a custom resource", r.b.w.Patch(ctx, g, action.MergePatch, []byte(`{"spec":{"size":3}}`)))
		size, _, _ := unstructured.NestedInt64(g.Object, "spec", "size")
		r.want("gadget size and generation", fmt.Sprint(size, " ", g.GetGeneration()), "3 2")
	}},
	{"ServerSideApply", func(r *run) {
		desired := configMap(r.b.ns, "applied", map[string]string{"app": "web"}, map[string]string{"k": "1"})
		r.must("apply creates", r.b.w.Patch(ctx, desired, action.ApplyPatch, nil, action.WithFieldManager("contract")))
		r.want("created by apply", desired.UID != "" && desired.Data["k"] == "1", true)
		rv := desired.ResourceVersion
		again := configMap(r.b.ns, "applied", map[string]string{"app": "web"}, map[string]string{"k": "2", "j": "3"})
		r.must("apply updates", r.b.w.Patch(ctx, again, action.ApplyPatch, nil, action.WithFieldManager("contract")))
		r.want("after the second apply", fmt.Sprint(again.Data, again.ResourceVersion != rv), "map[j:3 k:2] true")
		// Another writer adds a label and a key; apply leaves them alone.
		again.Labels["other"] = "writer"
		again.Data["other"] = "writer"
		r.must("update by another writer", r.b.w.Update(ctx, again))
		// The configuration no longer has the label app and the key j:
		// apply removes them, as the manager stopped applying them.
		data := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"applied"},"data":{"k":"4"}}`)
		target := configMap(r.b.ns, "applied", nil, nil)
		r.must("apply of a smaller configuration", r.b.w.Patch(ctx, target, action.ApplyPatch, data, action.WithFieldManager("contract")))
		r.want("after applying a smaller configuration", fmt.Sprint(target.Data, target.Labels), "map[k:4 other:writer] map[other:writer]")
		stale := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"applied","resourceVersion":%q},"data":{"k":"5"}}`, rv)
		r.want("apply with a stale resourceVersion", outcome(r.b.w.Patch(ctx, target.DeepCopy(), action.ApplyPatch, []byte(stale), action.WithFieldManager("contract"))), "Conflict")

		g := gadget(r.b.ns, "applied", 5)
		r.must("apply creates a gadget", r.b.w.Patch(ctx, g, action.ApplyPatch, nil, action.WithFieldManager("contract")))
		size, _, _ := unstructured.NestedInt64(g.Object, "spec", "size")
		r.want("applied gadget", fmt.Sprint(size, " ", g.GetGeneration()), "5 1")
	}},
	{"ListFiltersByNamespaceAndLabels", func(r *run) {
		run := map[string]string{"run": r.b.ns}
		for _, c := range []struct {
			ns, name, tier string
		}{{r.b.ns, "b", "gold"}, {r.b.ns, "a", "gold"}, {r.b.ns, "c", "silver"}, {r.b.other, "d", "gold"}} {
			labels := map[string]string{"run": r.b.ns, "tier": c.tier}
			r.must("create "+c.name, r.b.w.Create(ctx, configMap(c.ns, c.name, labels, nil)))
		}
		var all corev1.ConfigMapList
		r.must("list", r.b.r.List(ctx, r.b.ns, &all, query.MatchingLabels(run)))
		r.want("namespace", names(&all), "a,b,c")
		var gold corev1.ConfigMapList
		r.must("list gold", r.b.r.List(ctx, r.b.ns, &gold, query.WithLabelSelector("tier=gold")))
		r.want("tier=gold", names(&gold), "a,b")
		var notGold corev1.ConfigMapList
		r.must("list not gold", r.b.r.List(ctx, r.b.ns, &notGold, query.WithLabelSelector("tier!=gold")))
		r.want("tier!=gold", names(&notGold), "c")
		var everywhere corev1.ConfigMapList
		r.must("list everywhere", r.b.r.List(ctx, "", &everywhere, query.MatchingLabels(map[string]string{"run": r.b.ns, "tier": "gold"})))
		// Sorted by namespace first, and the API server's namespaces have
		// random names: compare the set.
		all3 := strings.Split(names(&everywhere), ",")
		sort.Strings(all3)
		r.want("all namespaces, gold", strings.Join(all3, ","), "a,b,d")
		u := &unstructured.UnstructuredList{}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMapList")
		r.must("unstructured list", r.b.r.List(ctx, r.b.ns, u, query.WithLabelSelector("tier in (gold,silver)")))
		r.want("unstructured, tier in (gold,silver)", names(u), "a,b,c")
		r.want("unstructured items' kind", u.Items[0].GetKind(), "ConfigMap")
		r.want("list resourceVersion set", u.GetResourceVersion() != "", true)
		r.want("bad selector", outcome(r.b.r.List(ctx, r.b.ns, u, query.WithLabelSelector("tier in gold"))), "client-side error")
		r.want("selector on Get", outcome(r.b.r.Get(ctx, configMap(r.b.ns, "a", nil, nil), query.WithLabelSelector("tier=gold"))), "client-side error")
		r.want("live get", outcome(r.b.r.Get(ctx, configMap(r.b.ns, "a", nil, nil), query.Live())), "ok")
	}},
	{"DeleteHonoursPreconditions", func(r *run) {
		cm := configMap(r.b.ns, "deleted", nil, nil)
		r.must("create", r.b.w.Create(ctx, cm))
		stale := cm.ResourceVersion
		cm.Data = map[string]string{"k": "v"}
		r.must("update", r.b.w.Update(ctx, cm))
		r.want("delete with a stale resourceVersion", outcome(r.b.w.Delete(ctx, cm.DeepCopy(), action.WithPreconditions("", stale))), "Conflict")
		r.want("delete with another uid", outcome(r.b.w.Delete(ctx, cm.DeepCopy(), action.WithPreconditions("0c5a6f6e-0000-4000-8000-000000000000", ""))), "Conflict")
		r.want("still there", outcome(r.b.r.Get(ctx, configMap(r.b.ns, "deleted", nil, nil))), "ok")
		r.want("delete with matching preconditions", outcome(r.b.w.Delete(ctx, cm.DeepCopy(), action.WithPreconditions(cm.UID, cm.ResourceVersion),
			action.WithPropagationPolicy(metav1.DeletePropagationBackground))), "ok")
		r.want("gone", outcome(r.b.r.Get(ctx, configMap(r.b.ns, "deleted", nil, nil))), "NotFound")
		r.want("delete again", outcome(r.b.w.Delete(ctx, cm.DeepCopy())), "NotFound")
	}},
	{"FinalizersHoldADeletedObject", func(r *run) {
		cm := configMap(r.b.ns, "held", nil, map[string]string{"k": "v"})
		cm.Finalizers = []string{"sdktest.handlerkit.dev/hold"}
		r.must("create", r.b.w.Create(ctx, cm))
		r.must("delete", r.b.w.Delete(ctx, cm))
		r.want("deletionTimestamp written back", cm.DeletionTimestamp != nil, true)
		got := configMap(r.b.ns, "held", nil, nil)
		r.must("get while finalizing", r.b.r.Get(ctx, got))
		r.want("still there, being deleted", got.DeletionTimestamp != nil && len(got.Finalizers) == 1, true)
		r.want("delete again while finalizing", outcome(r.b.w.Delete(ctx, got.DeepCopy())), "ok")
		more := got.DeepCopy()
		more.Finalizers = append(more.Finalizers, "sdktest.handlerkit.dev/another")
		r.want("add a finalizer while being deleted", outcome(r.b.w.Update(ctx, more)), "Invalid")
		got.Finalizers = nil
		r.must("remove the finalizer", r.b.w.Update(ctx, got))
		r.want("gone with its last finalizer", outcome(r.b.r.Get(ctx, configMap(r.b.ns, "held", nil, nil))), "NotFound")

		d := deployment(r.b.ns, "held", 1)
		d.Finalizers = []string{"sdktest.handlerkit.dev/hold"}
		r.must("create deployment", r.b.w.Create(ctx, d))
		r.must("delete deployment", r.b.w.Delete(ctx, d))
		r.want("deployment generation after delete", d.Generation, 2)
		r.must("remove the deployment's finalizer", r.b.w.Patch(ctx, d, action.MergePatch, []byte(`{"metadata":{"finalizers":null}}`)))
		r.want("deployment gone with its last finalizer", outcome(r.b.r.Get(ctx, deployment(r.b.ns, "held", 1))), "NotFound")
	}},
	{"StatusIsASubresource", func(r *run) {
		d := deployment(r.b.ns, "status", 1)
		r.must("create", r.b.w.Create(ctx, d))
		d.Spec.Replicas = ptr.To[int32](2)
		d.Status.Replicas = 5
		r.must("update", r.b.w.Update(ctx, d))
		r.want("update: spec, status, generation", fmt.Sprint(*d.Spec.Replicas, " ", d.Status.Replicas, " ", d.Generation), "2 0 2")
		d.Spec.Replicas = ptr.To[int32](3)
		d.Status.Replicas = 5
		d.Status.ObservedGeneration = d.Generation
		r.must("update status", r.b.w.UpdateStatus(ctx, d))
		r.want("update status: spec, status, generation", fmt.Sprint(*d.Spec.Replicas, " ", d.Status.Replicas, " ", d.Generation), "2 5 2")
		d.Labels = map[string]string{"only": "metadata"}
		r.must("metadata-only update", r.b.w.Update(ctx, d))
		r.want("generation after a metadata-only update", d.Generation, 2)

		g := gadget(r.b.ns, "status", 1)
		r.must("create gadget", r.b.w.Create(ctx, g))
		_ = unstructured.SetNestedField(g.Object, "ready", "status", "phase")
		_ = unstructured.SetNestedField(g.Object, int64(9), "spec", "size")
		r.must("update gadget status", r.b.w.UpdateStatus(ctx, g))
		phase, _, _ := unstructured.NestedString(g.Object, "status", "phase")
		size, _, _ := unstructured.NestedInt64(g.Object, "spec", "size")
		r.want("gadget after update status", fmt.Sprint(phase, " ", size, " ", g.GetGeneration()), "ready 1 1")
	}},
	{"PatchWithSubresourceWritesOnlyTheStatus", func(r *run) {
		g := gadget(r.b.ns, "status-patch", 1)
		r.must("create gadget", r.b.w.Create(ctx, g))
		rv := g.GetResourceVersion()
		r.must("merge patch of the status subresource", r.b.w.Patch(ctx, g, action.MergePatch,
			[]byte(`{"spec":{"size":9},"status":{"phase":"ready"}}`), action.WithSubresource("status")))
		phase, _, _ := unstructured.NestedString(g.Object, "status", "phase")
		size, _, _ := unstructured.NestedInt64(g.Object, "spec", "size")
		r.want("gadget after the status patch", fmt.Sprint(phase, " ", size, " ", g.GetGeneration(), " ", g.GetResourceVersion() != rv), "ready 1 1 true")
		stale := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"status":{"phase":"stale"}}`, rv)
		r.want("status patch with a stale resourceVersion", outcome(r.b.w.Patch(ctx, g.DeepCopy(), action.MergePatch, []byte(stale), action.WithSubresource("status"))), "Conflict")

		d := deployment(r.b.ns, "status-patch", 1)
		r.must("create deployment", r.b.w.Create(ctx, d))
		r.must("JSON patch of the status subresource", r.b.w.Patch(ctx, d, action.JSONPatch,
			[]byte(`[{"op":"add","path":"/status","value":{"replicas":4}}]`), action.WithSubresource("status")))
		r.want("deployment status and generation", fmt.Sprint(d.Status.Replicas, " ", d.Generation), "4 1")
		r.want("create with a subresource", outcome(r.b.w.Create(ctx, gadget(r.b.ns, "refused", 1), action.WithSubresource("status"))) != "ok", true)
	}},
	{"CustomResourcesNeedAResourceVersionToUpdate", func(r *run) {
		g := gadget(r.b.ns, "versioned", 1)
		r.must("create", r.b.w.Create(ctx, g))
		blind := gadget(r.b.ns, "versioned", 2)
		r.want("update without resourceVersion", outcome(r.b.w.Update(ctx, blind)), "Invalid")
		_ = unstructured.SetNestedField(g.Object, int64(2), "spec", "size")
		r.must("update", r.b.w.Update(ctx, g))
		r.want("generation after a spec update", g.GetGeneration(), 2)
	}},
	{"TypedAndUnstructuredShareTheStore", func(r *run) {
		cm := configMap(r.b.ns, "shared", nil, map[string]string{"k": "typed"})
		r.must("create typed", r.b.w.Create(ctx, cm))
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		u.SetNamespace(r.b.ns)
		u.SetName("shared")
		r.must("get unstructured", r.b.r.Get(ctx, u))
		v, _, _ := unstructured.NestedString(u.Object, "data", "k")
		r.want("unstructured sees", v, "typed")
		_ = unstructured.SetNestedField(u.Object, "unstructured", "data", "k")
		r.must("update unstructured", r.b.w.Update(ctx, u))
		got := configMap(r.b.ns, "shared", nil, nil)
		r.must("get typed", r.b.r.Get(ctx, got))
		r.want("typed sees", got.Data["k"], "unstructured")
		r.want("same resourceVersion", got.ResourceVersion == u.GetResourceVersion(), true)
	}},
	{"DryRunStoresNothing", func(r *run) {
		cm := configMap(r.b.ns, "dry", nil, map[string]string{"k": "v"})
		r.must("dry-run create", r.b.w.Create(ctx, cm, action.DryRun()))
		r.want("dry-run reply", cm.Data["k"], "v")
		r.want("after a dry-run create", outcome(r.b.r.Get(ctx, configMap(r.b.ns, "dry", nil, nil))), "NotFound")
		real := configMap(r.b.ns, "dry", nil, map[string]string{"k": "v"})
		r.must("create", r.b.w.Create(ctx, real))
		changed := real.DeepCopy()
		changed.Data["k"] = "dry"
		r.must("dry-run update", r.b.w.Update(ctx, changed, action.DryRun()))
		r.want("dry-run update reply", changed.Data["k"], "dry")
		got := configMap(r.b.ns, "dry", nil, nil)
		r.must("get", r.b.r.Get(ctx, got))
		r.want("after a dry-run update", got.Data["k"]+" "+fmt.Sprint(got.ResourceVersion == real.ResourceVersion), "v true")
		r.must("dry-run delete", r.b.w.Delete(ctx, got.DeepCopy(), action.DryRun()))
		r.want("after a dry-run delete", outcome(r.b.r.Get(ctx, configMap(r.b.ns, "dry", nil, nil))), "ok")
	}},
	{"ClusterScopedKinds", func(r *run) {
		name := "contract." + r.b.ns
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"run": r.b.ns}}}
		r.must("create", r.b.w.Create(ctx, role))
		r.want("no namespace", role.Namespace, "")
		r.want("get", outcome(r.b.r.Get(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}})), "ok")
		r.want("get with a namespace", outcome(r.b.r.Get(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Namespace: r.b.ns, Name: name}})), "ok")
		var list rbacv1.ClusterRoleList
		r.must("list", r.b.r.List(ctx, "", &list, query.MatchingLabels(map[string]string{"run": r.b.ns})))
		r.want("listed", names(&list), "contract")
		r.want("list in a namespace", outcome(r.b.r.List(ctx, r.b.ns, &list)), "client-side error")
		r.want("delete", outcome(r.b.w.Delete(ctx, role)), "ok")
		r.want("gone", outcome(r.b.r.Get(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}})), "NotFound")
	}},
	{"BadInputIsAnErrorNotAPanic", func(r *run) {
		r.want("get without name", outcome(r.b.r.Get(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.b.ns}})), "client-side error")
		r.want("get without namespace", outcome(r.b.r.Get(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}})), "client-side error")
		r.want("get a list", outcome(r.b.r.Get(ctx, &corev1.ConfigMapList{})), "client-side error")
		r.want("list a non-list", outcome(r.b.r.List(ctx, r.b.ns, &corev1.ConfigMap{})), "client-side error")
		r.want("get nil", outcome(r.b.r.Get(ctx, nil)), "client-side error")
		r.want("create nil", outcome(r.b.w.Create(ctx, nil)), "client-side error")
		r.want("create without kind", outcome(r.b.w.Create(ctx, &unstructured.Unstructured{Object: map[string]any{}})), "client-side error")
		r.want("create without name", outcome(r.b.w.Create(ctx, configMap(r.b.ns, "", nil, nil))), "client-side error")
		cm := configMap(r.b.ns, "x", nil, nil)
		r.want("empty merge patch", outcome(r.b.w.Patch(ctx, cm, action.MergePatch, nil)), "client-side error")
		r.want("force without apply", outcome(r.b.w.Patch(ctx, cm, action.MergePatch, []byte(`{}`), action.Force())), "client-side error")
		r.want("unknown patch type", outcome(r.b.w.Patch(ctx, cm, "application/unknown", []byte(`{}`))), "client-side error")
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		r.want("get with a cancelled context", outcome(r.b.r.Get(cancelled, cm, query.Live())), "Canceled")
		r.want("create with a cancelled context", outcome(r.b.w.Create(cancelled, cm)), "Canceled")
	}},
}
