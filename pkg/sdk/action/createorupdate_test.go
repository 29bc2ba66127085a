package action_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

type upsert func(ctx context.Context, r query.Interface, w action.Interface, obj *corev1.ConfigMap, mutate func() error) (action.OperationResult, error)

var upserts = []struct {
	name    string
	do      upsert
	method  string
	changed action.OperationResult
}{
	{"CreateOrUpdate", func(ctx context.Context, r query.Interface, w action.Interface, obj *corev1.ConfigMap, mutate func() error) (action.OperationResult, error) {
		return action.CreateOrUpdate(ctx, r, w, obj, mutate)
	}, http.MethodPut, action.Updated},
	{"CreateOrPatch", func(ctx context.Context, r query.Interface, w action.Interface, obj *corev1.ConfigMap, mutate func() error) (action.OperationResult, error) {
		return action.CreateOrPatch(ctx, r, w, obj, mutate)
	}, http.MethodPatch, action.Patched},
}

func TestCreateOrUpdateWritesOnlyWhatChanged(t *testing.T) {
	for _, u := range upserts {
		t.Run(u.name, func(t *testing.T) {
			f := newCountingFixture(t)
			ctx := context.Background()
			mode := "fast"
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "settings"}}
			mutate := func() error {
				if cm.Data == nil {
					cm.Data = map[string]string{}
				}
				cm.Data["mode"] = mode
				return nil
			}
			steps := []struct {
				mode   string
				want   action.OperationResult
				method string // the one write expected, "" for none
			}{
				{"fast", action.Created, http.MethodPost},
				{"fast", action.Unchanged, ""},
				{"safe", u.changed, u.method},
				{"safe", action.Unchanged, ""},
			}
			for i, s := range steps {
				mode = s.mode
				f.reqs.reset()
				got, err := u.do(ctx, f.r, f.w, cm, mutate)
				if err != nil || got != s.want {
					t.Fatalf("step %d: %s = %q, %v; want %q", i+1, u.name, got, err, s.want)
				}
				wantWrites := 0
				if s.method != "" {
					wantWrites = 1
				}
				if n := f.reqs.writes(); n != wantWrites || (s.method != "" && f.reqs.count(s.method, "/configmaps") != 1) {
					t.Fatalf("step %d (%s): requests\n%s\nwant %d write(s) %s", i+1, got, f.reqs, wantWrites, s.method)
				}
				stored, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Get(ctx, "settings", metav1.GetOptions{})
				if err != nil || stored.Data["mode"] != s.mode {
					t.Fatalf("step %d: stored %v, %v; want mode %s", i+1, stored.Data, err, s.mode)
				}
			}
		})
	}
}

// After a read that missed someone else's write, CreateOrUpdate fails with
// a Conflict rather than undo that write, and CreateOrPatch sends only its
// own change, which leaves that write in place.
func TestCreateOrUpdateFromAStaleReadLosesNoOtherWrite(t *testing.T) {
	for _, u := range upserts {
		t.Run(u.name, func(t *testing.T) {
			f := newCountingFixture(t)
			ctx := context.Background()
			cs := f.env.Clientset().CoreV1().ConfigMaps(f.ns)
			created, err := cs.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c"}, Data: map[string]string{"theirs": "1"}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			created.Kind, created.APIVersion = "ConfigMap", "v1"
			stale := &staleReader{Interface: f.r, snapshot: created.DeepCopy()}
			created.Data["theirs"] = "2"
			if _, err := cs.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c"}}
			got, err := u.do(ctx, stale, f.w, cm, func() error { cm.Data["mine"] = "x"; return nil })
			if stale.served != 1 {
				t.Fatalf("the stale snapshot was served %d times", stale.served)
			}
			stored, gerr := cs.Get(ctx, "c", metav1.GetOptions{})
			if gerr != nil {
				t.Fatal(gerr)
			}
			if stored.Data["theirs"] != "2" {
				t.Fatalf("%s from a stale read undid another write: stored %v", u.name, stored.Data)
			}
			switch u.changed {
			case action.Updated:
				if !apierrors.IsConflict(err) {
					t.Errorf("CreateOrUpdate from a stale read = %q, %v; want a conflict", got, err)
				}
			case action.Patched:
				if err != nil || got != action.Patched || stored.Data["mine"] != "x" {
					t.Errorf("CreateOrPatch from a stale read = %q, %v, stored %v; want patched with both keys", got, err, stored.Data)
				}
			}
		})
	}
}

func TestCreateOrUpdateRefusesAMutateThatRenames(t *testing.T) {
	for _, u := range upserts {
		t.Run(u.name, func(t *testing.T) {
			f := newCountingFixture(t)
			ctx := context.Background()
			for _, exists := range []bool{false, true} {
				if exists {
					if err := f.w.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c"}}); err != nil {
						t.Fatal(err)
					}
				}
				f.reqs.reset()
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c"}}
				_, err := u.do(ctx, f.r, f.w, cm, func() error { cm.Name = "other"; return nil })
				if err == nil || !strings.Contains(err.Error(), "must not") {
					t.Errorf("exists=%v: a renaming mutate gave %v", exists, err)
				}
				if n := f.reqs.writes(); n != 0 {
					t.Errorf("exists=%v: a renaming mutate sent %d writes", exists, n)
				}
			}
		})
	}
}

// In a handler, with the reader and writer of the handling's Operator
// (nil), a watched kind is read from the cache: keeping an owned object
// as it should be costs no request at all once it is.
func TestCreateOrUpdateInAHandlerReadsTheCacheAndWritesNothingWhenUnchanged(t *testing.T) {
	f := newCountingFixture(t)
	var (
		mu      sync.Mutex
		results []action.OperationResult
		failed  error
	)
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.op.Watch("v1", "Secret", f.ns, 0, sdk.WithOwnerOf("v1", "ConfigMap")); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		owner := e.Object.(*corev1.ConfigMap)
		if e.Deleted || owner.Name != "owner" {
			return nil
		}
		child := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: owner.Namespace, Name: owner.Name + "-child"}}
		res, err := action.CreateOrUpdate(ctx, nil, nil, child, func() error {
			child.StringData = nil
			child.Data = map[string][]byte{"from": []byte(owner.Name)}
			return action.SetControllerReference(owner, child, nil)
		})
		mu.Lock()
		defer mu.Unlock()
		results = append(results, res)
		if err != nil {
			failed = err
		}
		return err
	}))
	f.run(t)
	ctx := context.Background()
	owner, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snapshot := func() ([]action.OperationResult, error) {
		mu.Lock()
		defer mu.Unlock()
		return append([]action.OperationResult(nil), results...), failed
	}
	waitFor(t, "the child created", func() bool {
		r, _ := snapshot()
		return len(r) > 0 && r[0] == action.Created
	})
	// The child's creation wakes the owner (WithOwnerOf): that handling,
	// and one for a change of the owner, find the child as it should be.
	waitFor(t, "the owner handled again", func() bool { r, _ := snapshot(); return len(r) >= 2 })
	before, _ := snapshot()
	n := len(before)
	f.reqs.reset()
	owner.Labels = map[string]string{"touched": "yes"}
	if _, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Update(ctx, owner, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the owner handled after its change", func() bool { r, _ := snapshot(); return len(r) > n })
	r, err := snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range r[1:] {
		if res != action.Unchanged {
			t.Errorf("results = %v, want created then unchanged", r)
		}
	}
	if got := f.reqs.count("", "/secrets"); got != 0 {
		t.Errorf("handling an unchanged child sent %d requests about secrets, want none (cache reads, no writes):\n%s", got, f.reqs)
	}
	child, err := f.env.Clientset().CoreV1().Secrets(f.ns).Get(ctx, "owner-child", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(child, owner) {
		t.Errorf("child owner references = %+v, want controlled by the owner", child.OwnerReferences)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
