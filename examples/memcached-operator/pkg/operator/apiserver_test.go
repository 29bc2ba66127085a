package operator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	cachev1alpha1 "github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/apis/cache/v1alpha1"
	"github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/generated/clientset/versioned"
	typedv1alpha1 "github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/generated/clientset/versioned/typed/cache/v1alpha1"
	"github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/handler"
	"github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/operator"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// These tests run against a real kube-apiserver without a node (pkg/testenv's
// control-plane mode): no controller, scheduler or kubelet, so nothing but
// the test and the operator changes an object. That isolates what the
// end-to-end test (e2e/, with a node) cannot: which watch woke the handler.

// startControlPlane starts etcd and kube-apiserver, installs the generated
// CRD and returns the Memcached client of a fresh namespace.
func startControlPlane(t *testing.T) (*testenv.Environment, string, typedv1alpha1.MemcachedInterface) {
	t.Helper()
	env := testenv.New(t)
	if _, err := env.InstallCRDsFromDir(t.Context(), "../../deploy/crds"); err != nil {
		t.Fatal(err)
	}
	ns, err := env.CreateNamespace(t.Context(), "memcached")
	if err != nil {
		t.Fatal(err)
	}
	client, err := versioned.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	return env, ns, client.CacheV1alpha1().Memcacheds(ns)
}

func memcached(name string, size int32) *cachev1alpha1.Memcached {
	return &cachev1alpha1.Memcached{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: cachev1alpha1.MemcachedSpec{Size: size}}
}

// TestAPIServerEnforcesSizeBetween0And100 proves that the bounds written as
// markers in types.go reach the API server through the generated CRD, on
// create and on update alike.
func TestAPIServerEnforcesSizeBetween0And100(t *testing.T) {
	_, _, mcs := startControlPlane(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		size  int32
		valid bool
	}{
		{"minus-one", -1, false},
		{"zero", 0, true},
		{"one", 1, true},
		{"hundred", 100, true},
		{"hundred-one", 101, false},
	} {
		_, err := mcs.Create(ctx, memcached(tc.name, tc.size), metav1.CreateOptions{})
		switch {
		case tc.valid && err != nil:
			t.Errorf("creating a Memcached of size %d: %v, want it accepted", tc.size, err)
		case !tc.valid && !apierrors.IsInvalid(err):
			t.Errorf("creating a Memcached of size %d: %v, want Invalid", tc.size, err)
		case !tc.valid && !strings.Contains(err.Error(), "spec.size"):
			t.Errorf("creating a Memcached of size %d: %v, want the error to name spec.size", tc.size, err)
		}
	}
	for _, size := range []int32{-1, 101} {
		m, err := mcs.Get(ctx, "one", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m.Spec.Size = size
		if _, err := mcs.Update(ctx, m, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("updating a Memcached to size %d: %v, want Invalid", size, err)
		}
	}
}

// TestSecondaryWatchesWakeTheMemcached changes, behind the operator's back,
// only its Deployment and then only a pod, and sees the handler react to
// each while the Memcached itself is not written: the Deployment watch
// (sdk.WithOwnerOf) and the Pod watch (sdk.WithMapTo with handler.PodOwner)
// alone must have woken it. The handler returns no requeue once it has
// settled, and the watches have no resync, so nothing else could.
func TestSecondaryWatchesWakeTheMemcached(t *testing.T) {
	env, ns, mcs := startControlPlane(t)
	ctx := t.Context()
	log := logrus.New()
	log.SetOutput(testLog{t})
	op, err := operator.New(env.Config(), operator.Config{
		Namespaces:  ns,
		MetricsAddr: "0",
		Registry:    prometheus.NewRegistry(),
		Logger:      log,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("operator Run: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("the operator did not stop within a minute of its context ending")
		}
	})

	if _, err := mcs.Create(ctx, memcached("sessions", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deps := env.Clientset().AppsV1().Deployments(ns)
	var settled *cachev1alpha1.Memcached
	eventually(t, "the Deployment of 2 and a status without nodes", func(ctx context.Context) (bool, string, error) {
		d, err := deps.Get(ctx, "sessions", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "no Deployment", nil
		}
		if err != nil {
			return false, "", err
		}
		m, err := mcs.Get(ctx, "sessions", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		settled = m
		why := fmt.Sprintf("replicas %d, finalizers %v, status %+v", ptr.Deref(d.Spec.Replicas, -1), m.Finalizers, m.Status)
		return ptr.Deref(d.Spec.Replicas, -1) == 2 && slices.Contains(m.Finalizers, handler.Finalizer) &&
			m.Status.ObservedGeneration == m.Generation &&
			meta.IsStatusConditionFalse(m.Status.Conditions, cachev1alpha1.ConditionAvailable), why, nil
	})

	// The Deployment watch: someone scales the Deployment by hand, and the
	// operator sets it back to spec.size.
	d, err := deps.Get(ctx, "sessions", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Replicas = ptr.To[int32](7)
	if d, err = deps.Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the operator to scale the Deployment back to 2", func(ctx context.Context) (bool, string, error) {
		got, err := deps.Get(ctx, "sessions", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return ptr.Deref(got.Spec.Replicas, -1) == 2 && got.ResourceVersion != d.ResourceVersion,
			fmt.Sprintf("replicas %d", ptr.Deref(got.Spec.Replicas, -1)), nil
	})
	unwritten(t, mcs, settled)

	// The Pod watch: a pod with the Memcached's labels appears (no scheduler
	// runs, so it stays Pending), and status.nodes names it; it goes, and
	// status.nodes is empty again.
	pods := env.Clientset().CoreV1().Pods(ns)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sessions-5d8f7-x2k9q", Labels: handler.Labels(settled)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: handler.ContainerName, Image: handler.DefaultImage}}},
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "status.nodes to name the new pod", func(ctx context.Context) (bool, string, error) {
		m, err := mcs.Get(ctx, "sessions", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		settled = m
		return slices.Equal(m.Status.Nodes, []string{pod.Name}) && m.Status.ReadyNodes == 0,
			fmt.Sprintf("nodes %v, %d ready", m.Status.Nodes, m.Status.ReadyNodes), nil
	})
	// An unbound pod is deleted at once, without a grace period.
	if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "status.nodes to lose the deleted pod", func(ctx context.Context) (bool, string, error) {
		m, err := mcs.Get(ctx, "sessions", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return len(m.Status.Nodes) == 0, fmt.Sprintf("nodes %v", m.Status.Nodes), nil
	})
}

// unwritten fails the test if the Memcached has been written since want was read.
func unwritten(t *testing.T, mcs typedv1alpha1.MemcachedInterface, want *cachev1alpha1.Memcached) {
	t.Helper()
	got, err := mcs.Get(t.Context(), "sessions", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != want.ResourceVersion {
		t.Errorf("the Memcached was written (resourceVersion %s -> %s): status %+v", want.ResourceVersion, got.ResourceVersion, got.Status)
	}
}

// eventually polls cond every 100ms for up to 30s.
func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		ok, why, err := cond(ctx)
		last = why
		return ok, err
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; last state: %s", what, err, last)
	}
}

// testLog sends the operator's log to the test's.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
