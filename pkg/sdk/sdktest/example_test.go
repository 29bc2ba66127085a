package sdktest_test

import (
	"context"
	"fmt"
	"log"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
	"github.com/handlerkit/handlerkit/pkg/sdk/sdktest"
)

// secretMirror keeps, for every ConfigMap, a Secret named after it with
// the same data, owned by it. It reads and writes through the interfaces,
// so the operator gives it query.For(op) and action.For(op) and its tests
// give it an sdktest.Client.
type secretMirror struct {
	read  query.Interface
	write action.Interface
}

func (m secretMirror) Handle(ctx context.Context, e sdk.Event) error {
	if e.Deleted {
		return nil // the owner reference lets the garbage collector clean up
	}
	cm, ok := e.Object.(*corev1.ConfigMap)
	if !ok {
		return sdk.Terminal(fmt.Errorf("unexpected %T", e.Object))
	}
	want := map[string][]byte{}
	for k, v := range cm.Data {
		want[k] = []byte(v)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name + "-mirror"}}
	err := m.read.Get(ctx, secret)
	if apierrors.IsNotFound(err) {
		secret.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(cm, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}
		secret.Data = want
		return m.write.Create(ctx, secret)
	}
	if err != nil {
		return err
	}
	if maps.EqualFunc(secret.Data, want, func(a, b []byte) bool { return string(a) == string(b) }) {
		return nil // level-driven: nothing to do when the state is right
	}
	secret.Data = want
	return m.write.Update(ctx, secret) // a Conflict is retried with the newest state
}

// Unit testing a handler without an API server: the handler takes
// query.Interface and action.Interface, the test gives it an in-memory
// Client holding the objects it needs, calls Handle with an event, and
// reads back what it wrote.
func Example() {
	ctx := context.Background()
	settings := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings", UID: "6d1c2c1e-5b8e-4d35-9a63-3f4f1f0b2a10"},
		Data:       map[string]string{"mode": "fast"},
	}
	c, err := sdktest.NewClient(sdktest.WithObjects(settings))
	if err != nil {
		log.Fatal(err)
	}
	h := secretMirror{read: c, write: c}

	// The first event creates the Secret.
	if err := h.Handle(ctx, sdk.Event{Object: settings, Type: sdk.EventAdd}); err != nil {
		log.Fatal(err)
	}
	mirror := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings-mirror"}}
	if err := c.Get(ctx, mirror); err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(mirror.Data["mode"]), "owned by", mirror.OwnerReferences[0].Name)

	// Handling the same state again writes nothing.
	rv := mirror.ResourceVersion
	if err := h.Handle(ctx, sdk.Event{Object: settings, Type: sdk.EventResync}); err != nil {
		log.Fatal(err)
	}
	if err := c.Get(ctx, mirror); err != nil {
		log.Fatal(err)
	}
	fmt.Println("unchanged:", mirror.ResourceVersion == rv)

	// A change of the ConfigMap reaches the Secret.
	settings.Data["mode"] = "safe"
	if err := c.Update(ctx, settings); err != nil {
		log.Fatal(err)
	}
	if err := h.Handle(ctx, sdk.Event{Object: settings, Type: sdk.EventUpdate}); err != nil {
		log.Fatal(err)
	}
	if err := c.Get(ctx, mirror); err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(mirror.Data["mode"]))

	// The operator wires the same handler to the API server:
	//
	//	op.Handle(secretMirror{read: query.For(op), write: action.For(op)})

	// Output:
	// fast owned by settings
	// unchanged: true
	// safe
}

// A handler's reaction to a conflict can be tested too: a write with a
// stale resourceVersion fails as it would on a real server.
func ExampleClient_Update() {
	ctx := context.Background()
	c, err := sdktest.NewClient(sdktest.WithObjects(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"},
	}))
	if err != nil {
		log.Fatal(err)
	}
	mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}}
	if err := c.Get(ctx, mine); err != nil {
		log.Fatal(err)
	}
	theirs := mine.DeepCopy()
	theirs.Data = map[string]string{"writer": "them"}
	if err := c.Update(ctx, theirs); err != nil {
		log.Fatal(err)
	}
	mine.Data = map[string]string{"writer": "me"}
	err = c.Update(ctx, mine)
	fmt.Println(apierrors.IsConflict(err))
	// Output: true
}
