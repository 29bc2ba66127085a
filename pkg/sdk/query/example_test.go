package query_test

import (
	"context"
	"log"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// Reading one object in a handler: name and namespace go in the object
// itself, and the handler's context goes first.
func ExampleGet() {
	ctx := context.TODO() // in a handler: its ctx
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}}
	if err := query.Get(ctx, cm); err != nil {
		log.Fatal(err)
	}
	log.Println(cm.Data["mode"])
}

// Listing by label, typed or unstructured.
func ExampleList() {
	ctx := context.TODO() // in a handler: its ctx
	var pods corev1.PodList
	if err := query.List(ctx, "default", &pods, query.WithLabelSelector("app=web")); err != nil {
		log.Fatal(err)
	}
	widgets := &unstructured.UnstructuredList{}
	widgets.SetAPIVersion("example.dev/v1")
	widgets.SetKind("WidgetList")
	if err := query.List(ctx, "default", widgets, query.MatchingLabels(map[string]string{"tier": "gold"})); err != nil {
		log.Fatal(err)
	}
	log.Println(len(pods.Items), len(widgets.Items))
}

// A Reader on an explicit Operator, with a live read that bypasses the cache.
func ExampleFor() {
	var op *sdk.Operator // from sdk.New
	r := query.For(op)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}}
	if err := r.Get(context.Background(), cm, query.Live()); err != nil {
		log.Fatal(err)
	}
}
