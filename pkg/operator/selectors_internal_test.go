package operator

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

// blockingLister is an exporterLister whose calls each wait for a release,
// as a list from the API server waits for its answer.
type blockingLister struct {
	calls   atomic.Int32
	started chan int32    // each call's number, as it starts
	release chan struct{} // one value lets one call return
	names   []string      // the exporters each call returns
}

func (b *blockingLister) list(ctx context.Context, _ string, changed func(metav1.Object) bool) ([]jmxv1alpha1.PrometheusJmxExporter, error) {
	b.started <- b.calls.Add(1)
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var out []jmxv1alpha1.PrometheusJmxExporter
	for _, n := range b.names {
		ex := jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Name: n, ResourceVersion: "1"}}
		if changed(&ex) {
			out = append(out, ex)
		}
	}
	return out, nil
}

// While a list of a namespace's exporters is under way, the callers that
// arrive wait for the next one, which they share and which starts only once
// the first ends (a caller never gets a list that started before it asked),
// and a caller whose context ends returns at once: no caller waits on a lock
// held around a list (issue 41).
func TestSelectorListsOfANamespaceAreSharedAndNeverWaitedForUnderALock(t *testing.T) {
	var s exporterSelectors
	b := &blockingLister{started: make(chan int32, 8), release: make(chan struct{}), names: []string{"a", "b"}}
	ctx := t.Context()

	first := make(chan []*selectorRef, 1)
	go func() {
		refs, err := s.from(ctx, "ns", b.list)
		if err != nil {
			t.Error(err)
		}
		first <- refs
	}()
	if n := <-b.started; n != 1 {
		t.Fatalf("first list is call %d", n)
	}
	// Three callers arrive while the first list is under way.
	var wg sync.WaitGroup
	got := make([][]*selectorRef, 3)
	for i := range got {
		wg.Go(func() {
			refs, err := s.from(ctx, "ns", b.list)
			if err != nil {
				t.Error(err)
			}
			got[i] = refs
		})
	}
	// One whose context ends meanwhile returns without waiting for any list.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := s.from(short, "ns", b.list); err == nil {
		t.Error("a caller whose context ended got a list")
	}
	// Another namespace is not held up by this one's list.
	other := &blockingLister{started: make(chan int32, 1), release: make(chan struct{}, 1), names: []string{"c"}}
	other.release <- struct{}{}
	if refs, err := s.from(ctx, "other", other.list); err != nil || len(refs) != 1 {
		t.Errorf("another namespace: %d refs, %v", len(refs), err)
	}
	select {
	case n := <-b.started:
		t.Fatalf("list %d started while the first was under way", n)
	default:
	}
	b.release <- struct{}{}
	if refs := <-first; len(refs) != 2 {
		t.Errorf("first list: %d refs, want 2", len(refs))
	}
	if n := <-b.started; n != 2 {
		t.Fatalf("second list is call %d", n)
	}
	b.release <- struct{}{}
	wg.Wait()
	for i, refs := range got {
		if len(refs) != 2 {
			t.Errorf("caller %d: %d refs, want 2", i, len(refs))
		}
	}
	if n := b.calls.Load(); n != 2 {
		t.Errorf("%d lists for four callers, want 2 (the first, and one shared by the three that arrived during it)", n)
	}
}
