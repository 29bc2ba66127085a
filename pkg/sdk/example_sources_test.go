package sdk_test

import (
	"context"
	"log"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// One watch over several namespaces, as WATCH_NAMESPACE=team-a,team-b says:
// one informer per namespace behind one view.
func ExampleOperator_Watch_namespaces() {
	ns := os.Getenv("WATCH_NAMESPACE") // "team-a,team-b", one namespace, or "" for all
	if err := sdk.Watch("v1", "ConfigMap", ns, 0); err != nil {
		log.Fatal(err)
	}
}

// A secondary watch whose events wake the custom resources that select the
// object: here ConfigMaps holding a pod selector in data["selector"] stand
// in for them. The map function reads the target's cache through query, so
// a Pod event costs no request.
func ExampleWithMapTo() {
	if err := sdk.Watch("v1", "ConfigMap", "default", 0, sdk.WithName("selectors")); err != nil {
		log.Fatal(err)
	}
	selecting := func(ctx context.Context, obj runtime.Object) []string {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil
		}
		var cms corev1.ConfigMapList
		if err := query.For(sdk.OperatorFrom(ctx)).List(ctx, pod.Namespace, &cms); err != nil {
			return nil
		}
		var keys []string
		for _, cm := range cms.Items {
			if sel, err := labels.Parse(cm.Data["selector"]); err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) {
				keys = append(keys, cm.Namespace+"/"+cm.Name)
			}
		}
		return keys
	}
	if err := sdk.Watch("v1", "Pod", "default", 0, sdk.WithMapTo("selectors", selecting)); err != nil {
		log.Fatal(err)
	}
}

// Every owner, not only the controller: a Secret shared by several
// ConfigMaps wakes each of them.
func ExampleWithAnyOwnerOf() {
	if err := sdk.Watch("v1", "ConfigMap", "default", 0); err != nil {
		log.Fatal(err)
	}
	if err := sdk.Watch("v1", "Secret", "default", 0, sdk.WithAnyOwnerOf("v1", "ConfigMap")); err != nil {
		log.Fatal(err)
	}
}

// An index on the cache: "ConfigMaps that reference Secret X", answered from
// memory with query.MatchingIndex.
func ExampleWithIndex() {
	bySecret := func(obj runtime.Object) ([]string, error) {
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Data["secret"] != "" {
			return []string{cm.Data["secret"]}, nil
		}
		return nil, nil
	}
	if err := sdk.Watch("v1", "ConfigMap", "default", 0, sdk.WithIndex("secret", bySecret)); err != nil {
		log.Fatal(err)
	}
	sdk.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		var users corev1.ConfigMapList
		err := query.For(sdk.OperatorFrom(ctx)).List(ctx, "default", &users, query.MatchingIndex("secret", "db-password"))
		if err != nil {
			return err
		}
		sdk.LoggerFrom(ctx).Infof("%d ConfigMaps use db-password", len(users.Items))
		return nil
	}))
}

// A handler of one watch wakes a key of another: after handling a pod,
// refresh the status of the custom resource it belongs to.
func ExampleEnqueue() {
	sdk.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		pod, ok := e.Object.(*corev1.Pod)
		if !ok {
			return nil
		}
		if owner := pod.Labels["example.dev/owner"]; owner != "" {
			return sdk.Enqueue(ctx, "exporters", pod.Namespace+"/"+owner)
		}
		return nil
	}))
}
