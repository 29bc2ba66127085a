package handler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	cachev1alpha1 "github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/apis/cache/v1alpha1"
	"github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/handler"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/sdktest"
)

// fixture is a handler wired to an in-memory client: no API server, no
// watches. The test plays the parts of the user (the Memcached), of the
// Deployment controller and kubelet (the pods) and of the framework (the
// events it delivers).
type fixture struct {
	t        *testing.T
	client   *sdktest.Client
	writes   *countingWriter
	h        *handler.Handler
	events   *record.FakeRecorder
	cleanups int
}

// countingWriter counts the handler's write calls, whether or not they would
// change anything: the API server answers a no-op update without a new
// resourceVersion, so only counting shows that none was sent.
type countingWriter struct {
	action.Interface
	calls []string
}

func (w *countingWriter) record(verb string, obj runtime.Object) {
	w.calls = append(w.calls, fmt.Sprintf("%s %T", verb, obj))
}

func (w *countingWriter) Create(ctx context.Context, obj runtime.Object, opts ...action.Option) error {
	w.record("create", obj)
	return w.Interface.Create(ctx, obj, opts...)
}

func (w *countingWriter) Update(ctx context.Context, obj runtime.Object, opts ...action.Option) error {
	w.record("update", obj)
	return w.Interface.Update(ctx, obj, opts...)
}

func (w *countingWriter) UpdateStatus(ctx context.Context, obj runtime.Object, opts ...action.Option) error {
	w.record("updateStatus", obj)
	return w.Interface.UpdateStatus(ctx, obj, opts...)
}

func (w *countingWriter) Patch(ctx context.Context, obj runtime.Object, pt action.PatchType, data []byte, opts ...action.Option) error {
	w.record("patch", obj)
	return w.Interface.Patch(ctx, obj, pt, data, opts...)
}

func (w *countingWriter) Delete(ctx context.Context, obj runtime.Object, opts ...action.Option) error {
	w.record("delete", obj)
	return w.Interface.Delete(ctx, obj, opts...)
}

func newFixture(t *testing.T, size int32) *fixture {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := cachev1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	m := &cachev1alpha1.Memcached{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "sessions", UID: "0b6e4a36-2c55-4c0e-9a7e-5d1f4f3b8a11"},
		Spec:       cachev1alpha1.MemcachedSpec{Size: size},
	}
	c, err := sdktest.NewClient(sdktest.WithScheme(s), sdktest.WithObjects(m))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, client: c, writes: &countingWriter{Interface: c}, events: record.NewFakeRecorder(100)}
	f.h = &handler.Handler{Read: c, Write: f.writes, Scheme: s, Recorder: f.events,
		CleanUp: func(context.Context, *cachev1alpha1.Memcached) error { f.cleanups++; return nil }}
	return f
}

// memcached reads the Memcached as the framework would deliver it.
func (f *fixture) memcached() *cachev1alpha1.Memcached {
	f.t.Helper()
	m := &cachev1alpha1.Memcached{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "sessions"}}
	if err := f.client.Get(f.t.Context(), m); err != nil {
		f.t.Fatal(err)
	}
	return m
}

func (f *fixture) handle() error {
	f.t.Helper()
	return f.h.Handle(f.t.Context(), sdk.Event{Object: f.memcached(), Type: sdk.EventUpdate, Watch: "memcached"})
}

func (f *fixture) mustHandle() {
	f.t.Helper()
	if err := f.handle(); err != nil {
		f.t.Fatalf("Handle: %v", err)
	}
}

func (f *fixture) deployment() *appsv1.Deployment {
	f.t.Helper()
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "sessions"}}
	if err := f.client.Get(f.t.Context(), d); err != nil {
		f.t.Fatalf("the Deployment: %v", err)
	}
	return d
}

// runPods makes the pods the Deployment controller and kubelet would: n of
// them, all Ready, named like a ReplicaSet's.
func (f *fixture) runPods(n int) {
	f.t.Helper()
	m := f.memcached()
	for i := range n {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("sessions-5d8f7-%d", i), Labels: handler.Labels(m)},
		}
		if err := f.client.Create(f.t.Context(), p); err != nil {
			f.t.Fatal(err)
		}
		// Status goes through the status subresource, as the kubelet writes it.
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if err := f.client.UpdateStatus(f.t.Context(), p); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) deletePods() {
	f.t.Helper()
	var pods corev1.PodList
	if err := f.client.List(f.t.Context(), "shop", &pods); err != nil {
		f.t.Fatal(err)
	}
	for i := range pods.Items {
		if err := f.client.Delete(f.t.Context(), &pods.Items[i]); err != nil {
			f.t.Fatal(err)
		}
	}
}

// reasons drains the recorded Events and returns their reasons.
func (f *fixture) reasons() []string {
	var out []string
	for {
		select {
		case e := <-f.events.Events:
			out = append(out, strings.Fields(e)[1])
		default:
			return out
		}
	}
}

func TestHandlerCreatesAnOwnedDeploymentOfSizeReplicas(t *testing.T) {
	f := newFixture(t, 3)
	f.mustHandle()

	d := f.deployment()
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Fatalf("replicas %v, want 3", d.Spec.Replicas)
	}
	owner := metav1.GetControllerOf(d)
	if owner == nil || owner.Kind != "Memcached" || owner.Name != "sessions" || owner.APIVersion != "cache.example.handlerkit.dev/v1alpha1" {
		t.Fatalf("controller owner %+v, want the Memcached", owner)
	}
	c := d.Spec.Template.Spec.Containers
	if len(c) != 1 || c[0].Image != handler.DefaultImage || c[0].Ports[0].ContainerPort != handler.Port {
		t.Fatalf("containers %+v", c)
	}
	if sc := c[0].SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Fatalf("memcached must run as non-root: %+v", sc)
	}
	if sel := d.Spec.Selector.MatchLabels; sel[handler.LabelInstance] != "sessions" {
		t.Fatalf("selector %v", sel)
	}
	m := f.memcached()
	if !slices.Contains(m.Finalizers, handler.Finalizer) {
		t.Fatalf("finalizers %v, want %s", m.Finalizers, handler.Finalizer)
	}
	if got := f.reasons(); !slices.Equal(got, []string{handler.ReasonDeploymentCreated}) {
		t.Fatalf("events %v, want DeploymentCreated", got)
	}
	avail := meta.FindStatusCondition(m.Status.Conditions, cachev1alpha1.ConditionAvailable)
	if avail == nil || avail.Status != metav1.ConditionFalse || len(m.Status.Nodes) != 0 {
		t.Fatalf("status %+v, want Available=False and no nodes before any pod runs", m.Status)
	}
}

func TestHandlerWritesNothingWhenNothingChanged(t *testing.T) {
	f := newFixture(t, 3)
	f.mustHandle()
	f.runPods(3)
	f.mustHandle()
	f.reasons()
	depRV, memRV := f.deployment().ResourceVersion, f.memcached().ResourceVersion
	f.writes.calls = nil

	for range 3 {
		f.mustHandle()
	}
	if len(f.writes.calls) != 0 {
		t.Errorf("the handler wrote for a state that did not change: %v", f.writes.calls)
	}
	if rv := f.deployment().ResourceVersion; rv != depRV {
		t.Errorf("the Deployment was written again: resourceVersion %s -> %s", depRV, rv)
	}
	if rv := f.memcached().ResourceVersion; rv != memRV {
		t.Errorf("the Memcached (finalizers or status) was written again: resourceVersion %s -> %s", memRV, rv)
	}
	if got := f.reasons(); len(got) != 0 {
		t.Errorf("events %v for a state that did not change", got)
	}
}

func TestStatusListsThePodsAndBecomesAvailable(t *testing.T) {
	f := newFixture(t, 3)
	f.mustHandle()
	f.runPods(3)
	f.mustHandle()

	m := f.memcached()
	want := []string{"sessions-5d8f7-0", "sessions-5d8f7-1", "sessions-5d8f7-2"}
	if !slices.Equal(m.Status.Nodes, want) || m.Status.ReadyNodes != 3 {
		t.Fatalf("nodes %v (%d ready), want %v", m.Status.Nodes, m.Status.ReadyNodes, want)
	}
	if !meta.IsStatusConditionTrue(m.Status.Conditions, cachev1alpha1.ConditionAvailable) ||
		!meta.IsStatusConditionFalse(m.Status.Conditions, cachev1alpha1.ConditionProgressing) {
		t.Fatalf("conditions %+v, want Available=True, Progressing=False", m.Status.Conditions)
	}
	if m.Status.ObservedGeneration != m.Generation {
		t.Fatalf("observedGeneration %d, generation %d", m.Status.ObservedGeneration, m.Generation)
	}
}

func TestResizingScalesTheDeploymentAndRecordsAnEvent(t *testing.T) {
	f := newFixture(t, 3)
	f.mustHandle()
	f.reasons()
	m := f.memcached()
	m.Spec.Size = 4
	if err := f.client.Update(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	f.mustHandle()
	if r := *f.deployment().Spec.Replicas; r != 4 {
		t.Fatalf("replicas %d, want 4", r)
	}
	if got := f.reasons(); !slices.Equal(got, []string{handler.ReasonDeploymentScaled}) {
		t.Fatalf("events %v, want DeploymentScaled", got)
	}
	if meta.IsStatusConditionTrue(f.memcached().Status.Conditions, cachev1alpha1.ConditionAvailable) {
		t.Fatal("Available while no pod runs")
	}
}

func TestHandlerUndoesChangesToTheDeploymentItOwns(t *testing.T) {
	f := newFixture(t, 3)
	f.mustHandle()
	f.reasons()

	// Someone scales the Deployment by hand: the Deployment watch wakes the
	// Memcached, and the handler scales it back.
	d := f.deployment()
	d.Spec.Replicas = ptr.To[int32](7)
	if err := f.client.Update(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	f.mustHandle()
	if r := *f.deployment().Spec.Replicas; r != 3 {
		t.Fatalf("replicas %d after the handling, want spec.size 3", r)
	}
	if got := f.reasons(); !slices.Equal(got, []string{handler.ReasonDeploymentScaled}) {
		t.Fatalf("events %v, want DeploymentScaled", got)
	}

	// Someone changes the memcached container and adds one of their own:
	// the handler restores its container and leaves the other alone.
	d = f.deployment()
	d.Spec.Template.Spec.Containers[0].Image = "elsewhere/memcached:latest"
	d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "exporter", Image: "exporter:v1"})
	if err := f.client.Update(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	f.mustHandle()
	c := f.deployment().Spec.Template.Spec.Containers
	if len(c) != 2 || c[0].Name != handler.ContainerName || c[0].Image != handler.DefaultImage || c[1].Name != "exporter" {
		t.Fatalf("containers %+v, want memcached with %s, then exporter", c, handler.DefaultImage)
	}
	if got := f.reasons(); !slices.Equal(got, []string{handler.ReasonDeploymentUpdated}) {
		t.Fatalf("events %v, want DeploymentUpdated", got)
	}
}

func TestDeletionWithoutADeploymentCleansUpAtOnce(t *testing.T) {
	f := newFixture(t, 2)
	f.mustHandle()
	// The Deployment is gone already (deleted by hand, or never made).
	if err := f.client.Delete(t.Context(), f.deployment()); err != nil {
		t.Fatal(err)
	}
	f.reasons()
	if err := f.client.Delete(t.Context(), f.memcached()); err != nil {
		t.Fatal(err)
	}
	f.mustHandle()
	if f.cleanups != 1 {
		t.Fatalf("clean-up ran %d times, want 1", f.cleanups)
	}
	m := &cachev1alpha1.Memcached{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "sessions"}}
	if err := f.client.Get(t.Context(), m); !apierrors.IsNotFound(err) {
		t.Fatalf("Memcached after the finalizer: %v (finalizers %v), want NotFound", err, m.Finalizers)
	}
	if got := f.reasons(); !slices.Equal(got, []string{handler.ReasonCleanedUp}) {
		t.Fatalf("events %v, want only CleanedUp (nothing to drain)", got)
	}
	// The framework then delivers the deletion itself: nothing left to do.
	if err := f.h.Handle(t.Context(), sdk.Event{Object: m, Type: sdk.EventDelete, Deleted: true}); err != nil {
		t.Fatalf("Handle(deleted) = %v", err)
	}
}

func TestDeletionDrainsThenCleansUpThenReleasesTheFinalizer(t *testing.T) {
	f := newFixture(t, 3)
	f.mustHandle()
	f.runPods(3)
	f.mustHandle()
	f.reasons()
	if err := f.client.Delete(t.Context(), f.memcached()); err != nil {
		t.Fatal(err)
	}
	if f.memcached().DeletionTimestamp.IsZero() {
		t.Fatal("the finalizer did not hold the deleted Memcached")
	}

	// Pods still run: the Deployment goes to zero and the handler waits.
	err := f.handle()
	if err == nil || err.Error() != sdk.RequeueAfter(handler.DrainPollInterval).Error() {
		t.Fatalf("Handle while pods run: %v, want RequeueAfter(%s)", err, handler.DrainPollInterval)
	}
	if r := *f.deployment().Spec.Replicas; r != 0 {
		t.Fatalf("replicas %d while draining, want 0", r)
	}
	if f.cleanups != 0 {
		t.Fatal("clean-up ran while servers still ran")
	}

	// The pods are gone: clean-up runs, the finalizer goes, so does the object.
	f.deletePods()
	f.mustHandle()
	if f.cleanups != 1 {
		t.Fatalf("clean-up ran %d times, want 1", f.cleanups)
	}
	m := &cachev1alpha1.Memcached{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "sessions"}}
	if err := f.client.Get(t.Context(), m); !apierrors.IsNotFound(err) {
		t.Fatalf("Memcached after the finalizer: %v (finalizers %v), want NotFound", err, m.Finalizers)
	}
	got := f.reasons()
	if !slices.Equal(got, []string{handler.ReasonDraining, handler.ReasonDeploymentScaled, handler.ReasonCleanedUp}) {
		t.Fatalf("events %v", got)
	}
}

func TestFailedCleanUpKeepsTheFinalizerAndIsRetried(t *testing.T) {
	f := newFixture(t, 0)
	f.mustHandle()
	f.h.CleanUp = func(context.Context, *cachev1alpha1.Memcached) error { return errors.New("directory unreachable") }
	if err := f.client.Delete(t.Context(), f.memcached()); err != nil {
		t.Fatal(err)
	}
	if err := f.handle(); err == nil || !strings.Contains(err.Error(), "directory unreachable") {
		t.Fatalf("Handle: %v, want the clean-up error (retried with backoff)", err)
	}
	if !slices.Contains(f.memcached().Finalizers, handler.Finalizer) {
		t.Fatal("the finalizer was removed although clean-up failed")
	}
	if got := f.reasons(); !slices.Contains(got, handler.ReasonCleanupFailed) {
		t.Fatalf("events %v, want CleanupFailed", got)
	}
}

func TestPodsMapToTheirMemcachedAndOtherPodsToNothing(t *testing.T) {
	m := &cachev1alpha1.Memcached{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "sessions"}}
	ours := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "p", Labels: handler.Labels(m)}}
	if got := handler.PodOwner(t.Context(), ours); !slices.Equal(got, []string{"shop/sessions"}) {
		t.Fatalf("PodOwner(memcached pod) = %v", got)
	}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Labels: map[string]string{"app": "web"}}}
	if got := handler.PodOwner(t.Context(), other); len(got) != 0 {
		t.Fatalf("PodOwner(other pod) = %v, want nothing", got)
	}
}

func TestAnObjectOfAnotherKindIsATerminalError(t *testing.T) {
	f := newFixture(t, 1)
	err := f.h.Handle(t.Context(), sdk.Event{Object: &corev1.ConfigMap{}})
	if !sdk.IsTerminal(err) {
		t.Fatalf("Handle(ConfigMap) = %v, want a Terminal error", err)
	}
}
