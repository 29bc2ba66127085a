package operator_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/handlerkit/handlerkit/pkg/operator"
)

func TestOwnImageIsTheOperatorContainersImage(t *testing.T) {
	for _, tc := range []struct {
		name       string
		containers []corev1.Container
		want       string
	}{
		{"the manifests' pod", []corev1.Container{{Name: "operator", Image: "mirror/jmx-agent:v1",
			Command: []string{"/usr/local/bin/prometheus-jmx-exporter-operator"}}}, "mirror/jmx-agent:v1"},
		{"a mesh sidecar first, by command", []corev1.Container{{Name: "istio-proxy", Image: "proxy:1"},
			{Name: "manager", Image: "mirror/jmx-agent:v2", Command: []string{"/usr/local/bin/prometheus-jmx-exporter-operator"}}}, "mirror/jmx-agent:v2"},
		{"by name", []corev1.Container{{Name: "sidecar", Image: "proxy:1"}, {Name: "operator", Image: "mirror/jmx-agent:v3"}}, "mirror/jmx-agent:v3"},
		{"the only container", []corev1.Container{{Name: "x", Image: "mirror/jmx-agent:v4"}}, "mirror/jmx-agent:v4"},
		{"no way to tell", []corev1.Container{{Name: "a", Image: "a:1"}, {Name: "b", Image: "b:1"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "home", Name: "op-1"},
				Spec: corev1.PodSpec{Containers: tc.containers}})
			got, err := operator.OwnImage(context.Background(), client, "home", "op-1")
			if got != tc.want || (err != nil) != (tc.want == "") {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestOwnImageFailsAtOnceWhenDenied(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "op-1", nil)
	})
	if _, err := operator.OwnImage(context.Background(), client, "home", "op-1"); !apierrors.IsForbidden(err) {
		t.Fatalf("err %v, want the Forbidden", err)
	}
	if _, err := operator.OwnImage(context.Background(), fake.NewClientset(), "home", "gone"); !apierrors.IsNotFound(err) {
		t.Fatalf("err %v, want NotFound", err)
	}
}
