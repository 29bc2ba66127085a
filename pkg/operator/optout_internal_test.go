package operator

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
)

// TestANamespaceReadHoldsNoLock: while one namespace's read is under way
// (the API server does not answer), a namespace read before is answered
// from memory, and a pod's own label needs no read at all: the webhook's
// admissions never wait on another's API call. The read that fails
// (forbidden) is remembered and says which grant is missing.
func TestANamespaceReadHoldsNoLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kube := fake.NewSimpleClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "out", Labels: map[string]string{atstart.LabelOptOut: atstart.OptOutValue}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "slow"}})
	entered, release := make(chan struct{}), make(chan struct{})
	gets := map[string]int{}
	kube.PrependReactor("get", "namespaces", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.GetAction).GetName()
		gets[name]++ // the fake runs reactors under its own lock
		switch name {
		case "slow":
			close(entered)
			<-release
		case "denied":
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, name, nil)
		}
		return false, nil, nil
	})
	r := &Reconciler{opts: Options{Client: kube}}
	pod := func(ns string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Labels: labels}}
	}
	if why, err := r.optedOut(ctx, pod("out", nil)); err != nil || !strings.Contains(why, "namespace out") {
		t.Fatalf("namespace out: %q %v", why, err)
	}
	slow := make(chan error, 1)
	go func() {
		_, err := r.optedOut(ctx, pod("slow", nil))
		slow <- err
	}()
	<-entered
	// The slow read is under way: these answer without it.
	if why, err := r.optedOut(ctx, pod("out", nil)); err != nil || why == "" {
		t.Errorf("namespace out during the slow read: %q %v", why, err)
	}
	if why, err := r.optedOut(ctx, pod("slow", map[string]string{atstart.LabelOptOut: atstart.OptOutValue})); err != nil || !strings.Contains(why, "pod p") {
		t.Errorf("an opted-out pod during the slow read: %q %v", why, err)
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if why, err := r.optedOut(ctx, pod("slow", nil)); err != nil || why != "" {
		t.Errorf("namespace slow: %q %v, want not opted out", why, err)
	}
	for i := 0; i < 2; i++ {
		_, err := r.optedOut(ctx, pod("denied", nil))
		if err == nil || !strings.Contains(err.Error(), "cannot read namespace denied") || !strings.Contains(err.Error(), "get on namespaces") {
			t.Errorf("namespace denied: %v", err)
		}
	}
	if gets["out"] != 1 || gets["slow"] != 1 || gets["denied"] != 1 {
		t.Errorf("reads %v, want one of each namespace (remembered)", gets)
	}
}
