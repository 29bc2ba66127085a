package sdk_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// The API server tells a watch with a selector that an object stopped
// matching by sending a delete. The handler still sees Deleted, since the
// object left the watch's view, but its Type says the object still exists.
func TestObjectLeavingTheSelectorIsToldApartFromADelete(t *testing.T) {
	f := newFixture(t)
	rec := &recorder{}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithLabelSelector("app=web")); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	f.start(t)
	ctx := context.Background()
	cms := f.env.Clientset().CoreV1().ConfigMaps(f.ns)
	for _, name := range []string{"relabelled", "deleted"} {
		cm := configMap(f.ns, name, nil)
		cm.Labels = map[string]string{"app": "web"}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, name+" added", func() bool { return len(rec.find(name, nil)) == 1 })
	}

	cm, err := cms.Get(ctx, "relabelled", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Labels["app"] = "db"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone := func(e sdk.Event) bool { return e.Deleted }
	for _, name := range []string{"relabelled", "deleted"} {
		eventually(t, 10*time.Second, name+" gone from the watch", func() bool { return len(rec.find(name, gone)) == 1 })
	}

	left := rec.find("relabelled", gone)[0]
	if left.Type != sdk.EventLeftSelection {
		t.Errorf("relabelled object: Type %q, want %q", left.Type, sdk.EventLeftSelection)
	}
	if got := left.Object.(*corev1.ConfigMap).Labels["app"]; got != "web" {
		t.Errorf("relabelled object carries app=%q, want the last state the watch saw (app=web)", got)
	}
	if del := rec.find("deleted", gone)[0]; del.Type != sdk.EventDelete {
		t.Errorf("deleted object: Type %q, want %q", del.Type, sdk.EventDelete)
	}
}
