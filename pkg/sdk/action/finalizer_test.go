package action_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

func (f *countingFixture) liveCM(t *testing.T, name string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}
	if err := f.r.Get(context.Background(), cm, query.Live()); err != nil {
		t.Fatal(err)
	}
	return cm
}

func TestFinalizerIsAddedAndRemovedOnceWithOneWriteEach(t *testing.T) {
	f := newCountingFixture(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c", Finalizers: []string{"other.dev/keep"}}}
	if err := f.w.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	const fin = "example.dev/cleanup"
	f.reqs.reset()
	for i, wantChanged := range []bool{true, false} {
		changed, err := action.AddFinalizer(ctx, f.w, cm, fin)
		if err != nil || changed != wantChanged {
			t.Fatalf("AddFinalizer #%d = %v, %v; want %v", i+1, changed, err, wantChanged)
		}
	}
	if !action.HasFinalizer(cm, fin) || !action.HasFinalizer(f.liveCM(t, "c"), fin) {
		t.Fatalf("finalizer missing after AddFinalizer: in memory %v, stored %v", cm.Finalizers, f.liveCM(t, "c").Finalizers)
	}
	if n := f.reqs.writes(); n != 1 {
		t.Errorf("two adds sent %d writes, want 1:\n%s", n, f.reqs)
	}
	f.reqs.reset()
	for i, wantChanged := range []bool{true, false} {
		changed, err := action.RemoveFinalizer(ctx, f.w, cm, fin)
		if err != nil || changed != wantChanged {
			t.Fatalf("RemoveFinalizer #%d = %v, %v; want %v", i+1, changed, err, wantChanged)
		}
	}
	if got := f.liveCM(t, "c").Finalizers; !slices.Equal(got, []string{"other.dev/keep"}) {
		t.Errorf("stored finalizers after removal = %v, want only the other one", got)
	}
	if n := f.reqs.writes(); n != 1 {
		t.Errorf("two removals sent %d writes, want 1:\n%s", n, f.reqs)
	}
}

// Two handlers add their finalizers from copies read before either wrote:
// the second write fails instead of dropping the first finalizer, and a
// retry from fresh state adds it.
func TestFinalizerFromAStaleCopyConflictsInsteadOfClobbering(t *testing.T) {
	f := newCountingFixture(t)
	ctx := context.Background()
	if err := f.w.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c"}}); err != nil {
		t.Fatal(err)
	}
	for _, existing := range [][]string{nil, {"x.dev/a"}} {
		a, b := f.liveCM(t, "c"), f.liveCM(t, "c")
		finA, finB := fmt.Sprintf("a.dev/%d", len(existing)), fmt.Sprintf("b.dev/%d", len(existing))
		if _, err := action.AddFinalizer(ctx, f.w, a, finA); err != nil {
			t.Fatal(err)
		}
		changed, err := action.AddFinalizer(ctx, f.w, b, finB)
		if !apierrors.IsConflict(err) || changed {
			t.Fatalf("add from a stale copy = %v, %v; want a conflict", changed, err)
		}
		if stored := f.liveCM(t, "c"); !action.HasFinalizer(stored, finA) || action.HasFinalizer(stored, finB) {
			t.Fatalf("after the refused add, stored finalizers = %v", stored.Finalizers)
		}
		b = f.liveCM(t, "c")
		if _, err := action.AddFinalizer(ctx, f.w, b, finB); err != nil {
			t.Fatal(err)
		}
		if stored := f.liveCM(t, "c"); !action.HasFinalizer(stored, finA) || !action.HasFinalizer(stored, finB) {
			t.Fatalf("stored finalizers = %v, want both %s and %s", stored.Finalizers, finA, finB)
		}
		// A stale removal is refused too.
		stale := a.DeepCopy()
		if _, err := action.RemoveFinalizer(ctx, f.w, stale, finA); !apierrors.IsConflict(err) {
			t.Fatalf("remove from a stale copy = %v, want a conflict", err)
		}
	}
}

func TestConcurrentFinalizerAddsAllLand(t *testing.T) {
	f := newCountingFixture(t)
	ctx := context.Background()
	if err := f.w.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c"}}); err != nil {
		t.Fatal(err)
	}
	const n = 6
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			backoff := wait.Backoff{Steps: 50, Duration: 5e6, Factor: 1.2, Jitter: 1}
			errs <- retry.RetryOnConflict(backoff, func() error {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c"}}
				if err := f.r.Get(ctx, cm, query.Live()); err != nil {
					return err
				}
				_, err := action.AddFinalizer(ctx, f.w, cm, fmt.Sprintf("writer.dev/%d", i))
				return err
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := f.liveCM(t, "c").Finalizers; len(got) != n {
		t.Fatalf("stored finalizers = %v, want all %d", got, n)
	}
}

func TestRemovingTheLastFinalizerLetsADeletionFinish(t *testing.T) {
	f := newCountingFixture(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c", Finalizers: []string{"example.dev/cleanup"}}}
	if err := f.w.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := f.w.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if cm.DeletionTimestamp == nil {
		t.Fatal("the object is not being deleted")
	}
	if _, err := action.AddFinalizer(ctx, f.w, cm, "example.dev/late"); err == nil {
		t.Error("adding a finalizer to an object being deleted succeeded; the API server forbids it")
	}
	if changed, err := action.RemoveFinalizer(ctx, f.w, cm, "example.dev/cleanup"); err != nil || !changed {
		t.Fatalf("RemoveFinalizer = %v, %v", changed, err)
	}
	err := f.r.Get(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c"}}, query.Live())
	if !apierrors.IsNotFound(err) {
		t.Errorf("after its last finalizer went, Get = %v, want NotFound", err)
	}
}

func TestFinalizerBadInput(t *testing.T) {
	ctx := context.Background()
	unread := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "c"}}
	var nilCM *corev1.ConfigMap
	if _, err := action.AddFinalizer(ctx, nil, unread, "x.dev/y"); err == nil {
		t.Error("AddFinalizer on an object without resourceVersion succeeded")
	}
	if _, err := action.AddFinalizer(ctx, nil, nilCM, "x.dev/y"); err == nil {
		t.Error("AddFinalizer on nil succeeded")
	}
	unread.ResourceVersion = "1"
	if _, err := action.AddFinalizer(ctx, nil, unread, ""); err == nil {
		t.Error("AddFinalizer with an empty name succeeded")
	}
	if _, err := action.AddFinalizer(ctx, nil, unread, "x.dev/y"); err == nil {
		t.Error("AddFinalizer with no writer outside a handling succeeded")
	}
	if action.HasFinalizer(nilCM, "x") {
		t.Error("HasFinalizer(nil) = true")
	}
}
