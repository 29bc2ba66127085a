package action_test

import (
	"context"
	"encoding/json"
	"log"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
)

// Creating an object in a handler, with the handler's context; the reply
// (uid, resourceVersion, defaults) lands in it.
func ExampleCreate() {
	ctx := context.TODO() // in a handler: its ctx
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}, Data: map[string]string{"mode": "fast"}}
	if err := action.Create(ctx, cm); err != nil {
		log.Fatal(err)
	}
	log.Println(cm.UID, cm.ResourceVersion)
}

// Server-side apply of the desired state, owned by this operator.
func ExamplePatch() {
	ctx := context.TODO() // in a handler: its ctx
	desired := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}, Data: map[string]string{"mode": "safe"}}
	if err := action.Patch(ctx, desired, action.ApplyPatch, nil, action.WithFieldManager("my-operator"), action.Force()); err != nil {
		log.Fatal(err)
	}
	// A merge patch names the object and carries only the change.
	target := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}}
	if err := action.Patch(ctx, target, action.MergePatch, []byte(`{"data":{"mode":"fast"}}`)); err != nil {
		log.Fatal(err)
	}
}

// A Writer on an explicit Operator, deleting in the foreground.
func ExampleWriter_Delete() {
	var op *sdk.Operator // from sdk.New
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}}
	if err := action.For(op).Delete(context.Background(), cm, action.WithPropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		log.Fatal(err)
	}
}

// Server-side apply of only the fields this operator manages. A typed
// object sends, and so claims, every zero-valued field it has; an apply
// configuration from k8s.io/client-go/applyconfigurations sends only what
// was set. The reply lands in the typed object passed along.
func ExamplePatch_applyConfiguration() {
	ctx := context.TODO() // in a handler: its ctx
	desired := corev1ac.ConfigMap("settings", "default").WithData(map[string]string{"mode": "safe"})
	data, err := json.Marshal(desired)
	if err != nil {
		log.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}}
	if err := action.Patch(ctx, cm, action.ApplyPatch, data, action.WithFieldManager("my-operator")); err != nil {
		log.Fatal(err)
	}
	log.Println(cm.Data)
}

// A partial unstructured object applied with nil data sends, and claims,
// only the fields it holds.
func ExamplePatch_partialUnstructured() {
	ctx := context.TODO() // in a handler: its ctx
	desired := &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{"mode": "safe"}}}
	desired.SetAPIVersion("v1")
	desired.SetKind("ConfigMap")
	desired.SetNamespace("default")
	desired.SetName("settings")
	if err := action.Patch(ctx, desired, action.ApplyPatch, nil, action.WithFieldManager("my-operator")); err != nil {
		log.Fatal(err)
	}
}
