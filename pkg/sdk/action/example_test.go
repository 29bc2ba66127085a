package action_test

import (
	"context"
	"log"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
)

// Creating an object; the reply (uid, resourceVersion, defaults) lands in it.
func ExampleCreate() {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}, Data: map[string]string{"mode": "fast"}}
	if err := action.Create(cm); err != nil {
		log.Fatal(err)
	}
	log.Println(cm.UID, cm.ResourceVersion)
}

// Server-side apply of the desired state, owned by this operator.
func ExamplePatch() {
	desired := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}, Data: map[string]string{"mode": "safe"}}
	if err := action.Patch(desired, action.ApplyPatch, nil, action.WithFieldManager("my-operator"), action.Force()); err != nil {
		log.Fatal(err)
	}
	// A merge patch names the object and carries only the change.
	target := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}}
	if err := action.Patch(target, action.MergePatch, []byte(`{"data":{"mode":"fast"}}`)); err != nil {
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
