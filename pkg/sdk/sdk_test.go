package sdk_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

func TestAddUpdateDeleteReachHandlerAndDeleteCarriesFinalState(t *testing.T) {
	f := newFixture(t)
	rec := &recorder{}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	f.start(t)

	ctx := context.Background()
	cms := f.env.Clientset().CoreV1().ConfigMaps(f.ns)
	cm, err := cms.Create(ctx, configMap(f.ns, "one", map[string]string{"v": "1"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "add", func() bool { return len(rec.find("one", nil)) > 0 })
	first := rec.find("one", nil)[0]
	if first.Type != sdk.EventAdd || first.Deleted || first.Watch != "configmap/"+f.ns {
		t.Fatalf("first event = %+v, want an add on watch configmap/%s", first, f.ns)
	}
	if _, ok := first.Object.(*corev1.ConfigMap); !ok {
		t.Fatalf("object is %T, want *corev1.ConfigMap", first.Object)
	}
	if gvk := first.Object.GetObjectKind().GroupVersionKind(); gvk.Kind != "ConfigMap" || gvk.Version != "v1" {
		t.Errorf("object kind = %v, want v1 ConfigMap", gvk)
	}

	cm.Data["v"] = "2"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "update", func() bool {
		return len(rec.find("one", func(e sdk.Event) bool {
			return e.Type == sdk.EventUpdate && e.Object.(*corev1.ConfigMap).Data["v"] == "2"
		})) > 0
	})

	if err := cms.Delete(ctx, "one", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "delete", func() bool {
		return len(rec.find("one", func(e sdk.Event) bool { return e.Deleted })) > 0
	})
	del := rec.find("one", func(e sdk.Event) bool { return e.Deleted })[0]
	final, ok := del.Object.(*corev1.ConfigMap)
	if !ok || del.Type != sdk.EventDelete {
		t.Fatalf("delete event = %+v, want a *corev1.ConfigMap with type delete", del)
	}
	if final.Data["v"] != "2" || final.Name != "one" || final.Namespace != f.ns {
		t.Errorf("final state = %s/%s %v, want %s/one with v=2", final.Namespace, final.Name, final.Data, f.ns)
	}
	eventually(t, 10*time.Second, "final-state store to empty", func() bool {
		p, fin := f.op.TrackerSize("configmap/" + f.ns)
		return p == 0 && fin == 0
	})
}
