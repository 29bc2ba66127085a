package sdk_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// Every request the Operator's clients send is counted by Kubernetes verb
// and resource, as the API server's authorizer names them, with its status
// code: what the operator costs the API server, per resource.
func TestClientRequestsAreCountedByVerbAndResource(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cms := f.op.Clientset().CoreV1().ConfigMaps(f.ns)
	if _, err := cms.Create(ctx, configMap(f.ns, "counted", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := cms.Get(ctx, "counted", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "missing", metav1.GetOptions{}); err == nil {
		t.Fatal("Get of a missing object succeeded")
	}
	cm.Data = map[string]string{"k": "v"}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Patch(ctx, "counted", types.MergePatchType, []byte(`{"data":{"k":"w"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	pods := f.op.Clientset().CoreV1().Pods(f.ns)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Patch(ctx, "p", types.MergePatchType, []byte(`{"status":{"message":"counted"}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "counted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.op.Clientset().Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ verb, resource, code string }{
		{"create", "configmaps", "201"},
		{"get", "configmaps", "200"},
		{"get", "configmaps", "404"},
		{"update", "configmaps", "200"},
		{"patch", "configmaps", "200"},
		{"list", "configmaps", "200"},
		{"watch", "configmaps", "200"},
		{"create", "pods", "201"},
		{"patch", "pods/status", "200"},
		{"delete", "configmaps", "200"},
		{"deletecollection", "configmaps", "200"},
		{"get", "", "200"},
	} {
		labels := map[string]string{"verb": c.verb, "resource": c.resource, "code": c.code}
		if got := sumMatching(t, f.reg, "handlerkit_client_requests_total", labels); got != 1 {
			t.Errorf("handlerkit_client_requests_total%v = %v, want 1", labels, got)
		}
	}
	// A client built from RESTConfig counts as the Operator's.
	other, err := kubernetes.NewForConfig(f.op.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.CoreV1().Pods(f.ns).Get(ctx, "p", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := sumMatching(t, f.reg, "handlerkit_client_requests_total", map[string]string{"verb": "get", "resource": "pods"}); got != 1 {
		t.Errorf("a Get through a client built from RESTConfig counted %v times, want 1", got)
	}
}

func TestRequestVerbNamesVerbAndResourceAsTheAuthorizerDoes(t *testing.T) {
	for _, c := range []struct {
		method, url    string
		verb, resource string
	}{
		{"GET", "/api/v1/namespaces/a/pods/p", "get", "pods"},
		{"GET", "/api/v1/namespaces/a/pods", "list", "pods"},
		{"GET", "/api/v1/pods", "list", "pods"},
		{"GET", "/api/v1/namespaces/a/pods?watch=true&resourceVersion=1", "watch", "pods"},
		{"GET", "/api/v1/watch/namespaces/a/pods", "watch", "pods"},
		{"PATCH", "/api/v1/namespaces/a/pods/p/ephemeralcontainers", "patch", "pods/ephemeralcontainers"},
		{"POST", "/api/v1/namespaces/a/pods/p/exec?command=sh", "create", "pods/exec"},
		{"POST", "/api/v1/namespaces/a/events", "create", "events"},
		{"PUT", "/apis/jmx.handlerkit.dev/v1alpha1/namespaces/a/prometheusjmxexporters/e/status", "update", "prometheusjmxexporters/status"},
		{"DELETE", "/api/v1/namespaces/a/configmaps", "deletecollection", "configmaps"},
		{"DELETE", "/api/v1/namespaces/a", "delete", "namespaces"},
		{"PUT", "/api/v1/namespaces/a/finalize", "update", "namespaces/finalize"},
		{"GET", "/api/v1/namespaces/a/status", "get", "namespaces/status"},
		{"HEAD", "/api/v1/nodes/n", "get", "nodes"},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/a/leases/l", "get", "leases"},
		{"GET", "/apis/jmx.handlerkit.dev/v1alpha1", "get", ""},
		{"GET", "/api", "get", ""},
		{"GET", "/version", "get", ""},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		verb, resource := sdk.RequestVerb(c.method, u)
		if verb != c.verb || resource != c.resource {
			t.Errorf("%s %s: verb %q resource %q, want %q %q", c.method, c.url, verb, resource, c.verb, c.resource)
		}
	}
}
