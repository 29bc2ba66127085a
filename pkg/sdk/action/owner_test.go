package action_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/handlerkit/handlerkit/pkg/sdk/action"
)

func TestControllerReferenceIsSetOnceAndASecondControllerIsRefused(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	first := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "first"}}
	second := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "second"}}
	for _, o := range []*corev1.ConfigMap{first, second} {
		if err := f.w.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	owned := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "owned"}}
	if err := action.SetControllerReference(first, owned, clientgoscheme.Scheme); err != nil {
		t.Fatal(err)
	}
	if err := f.w.Create(ctx, owned); err != nil {
		t.Fatal(err)
	}
	refs := owned.OwnerReferences
	if len(refs) != 1 || refs[0].APIVersion != "v1" || refs[0].Kind != "ConfigMap" || refs[0].Name != "first" || refs[0].UID != first.UID ||
		refs[0].Controller == nil || !*refs[0].Controller || refs[0].BlockOwnerDeletion == nil || !*refs[0].BlockOwnerDeletion {
		t.Fatalf("stored owner references = %+v, want one controller reference to ConfigMap first", refs)
	}

	// Setting the same controller again changes nothing.
	if err := action.SetControllerReference(first, owned, clientgoscheme.Scheme); err != nil || len(owned.OwnerReferences) != 1 {
		t.Fatalf("same controller again: err %v, refs %+v", err, owned.OwnerReferences)
	}

	// A second controller is refused, and named.
	err := action.SetControllerReference(second, owned, clientgoscheme.Scheme)
	var owner *action.AlreadyOwnedError
	if !errors.As(err, &owner) || owner.Owner.Name != "first" || !strings.Contains(err.Error(), `"first"`) {
		t.Fatalf("second controller: err = %v, want an AlreadyOwnedError naming first", err)
	}
	if len(owned.OwnerReferences) != 1 {
		t.Fatalf("a refused controller changed the references: %+v", owned.OwnerReferences)
	}

	// A plain owner reference is added once, and never demotes the
	// controller.
	for range 2 {
		if err := action.SetOwnerReference(second, owned, nil); err != nil {
			t.Fatal(err)
		}
		if err := action.SetOwnerReference(first, owned, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.w.Update(ctx, owned); err != nil {
		t.Fatal(err)
	}
	stored, err := f.env.Clientset().CoreV1().Secrets(f.ns).Get(ctx, "owned", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := stored.OwnerReferences; len(got) != 2 || got[0].Name != "first" || !*got[0].Controller || got[1].Name != "second" || got[1].Controller != nil {
		t.Fatalf("stored references = %+v, want the controller first and a plain reference to second", got)
	}
}

func TestOwnerReferenceRefusesBadOwners(t *testing.T) {
	owned := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "owned"}}
	unsaved := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "unsaved"}}
	elsewhere := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "elsewhere", UID: "u1"}}
	var nilOwner *corev1.ConfigMap
	for _, c := range []struct {
		name  string
		owner metav1.Object
		want  string
	}{
		{"no uid", unsaved, "no name or uid"},
		{"other namespace", elsewhere, "another namespace"},
		{"nil", nilOwner, "nil"},
		{"unknown kind", &metav1.ObjectMeta{Name: "x", UID: "u"}, "not a runtime.Object"},
	} {
		err := action.SetControllerReference(c.owner, owned, clientgoscheme.Scheme)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one saying %q", c.name, err, c.want)
		}
	}
	if len(owned.OwnerReferences) != 0 {
		t.Errorf("refused owners left references: %+v", owned.OwnerReferences)
	}
}

// An unstructured owner, as a handler gets for a kind outside the scheme,
// names its own kind.
func TestOwnerReferenceToAnUnstructuredOwner(t *testing.T) {
	f := newFixture(t)
	g := gadget(f.ns, "g")
	if err := f.w.Create(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	owned := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "owned"}}
	if err := action.SetControllerReference(g, owned, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.w.Create(context.Background(), owned); err != nil {
		t.Fatal(err)
	}
	if r := owned.OwnerReferences; len(r) != 1 || r[0].APIVersion != group+"/v1" || r[0].Kind != "Gadget" || r[0].UID != g.GetUID() {
		t.Errorf("references = %+v", r)
	}
}
