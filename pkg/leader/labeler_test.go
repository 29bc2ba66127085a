package leader_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/handlerkit/handlerkit/pkg/leader"
)

func TestLeaderLabelComesBackAfterManualRemoval(t *testing.T) {
	ns := newNamespace(t)
	createPod(t, ns, "op-a", operatorLabels)
	a := startReplica(t, "op-a", newForLife(t, ns, "op-a", nil))
	eventually(t, 30*time.Second, "op-a leads", a.leading)
	eventually(t, 30*time.Second, "op-a labelled", onlyLabelled(t, ns, "op-a"))

	for range 2 {
		_, err := env.Clientset().CoreV1().Pods(ns).Patch(context.Background(), "op-a", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"leader":null}}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "the label comes back", onlyLabelled(t, ns, "op-a"))
	}
}

func TestLeaderLabelIsRemovedFromOtherPodsOfTheOperatorOnly(t *testing.T) {
	ns := newNamespace(t)
	createPod(t, ns, "op-a", operatorLabels)
	createPod(t, ns, "op-stale", map[string]string{"app": "test-operator", "leader": "true", "pod-template-hash": "old"})
	createPod(t, ns, "other-app", map[string]string{"app": "other", "leader": "true"})
	a := startReplica(t, "op-a", newForLife(t, ns, "op-a", nil))
	eventually(t, 30*time.Second, "op-a leads", a.leading)
	eventually(t, 30*time.Second, "op-stale loses the label", func() bool {
		got := labelledPods(t, ns)
		return len(got) == 2 && got[0] == "op-a" && got[1] == "other-app"
	})
}

func TestLeaderLabelIsConfigurable(t *testing.T) {
	ns := newNamespace(t)
	createPod(t, ns, "op-a", operatorLabels)
	a := startReplica(t, "op-a", newForLife(t, ns, "op-a", nil, leader.WithLeaderLabel("example.com/role", "leader")))
	eventually(t, 30*time.Second, "op-a leads", a.leading)
	eventually(t, 30*time.Second, "op-a carries the custom label", func() bool {
		p, err := env.Clientset().CoreV1().Pods(ns).Get(context.Background(), "op-a", metav1.GetOptions{})
		return err == nil && p.Labels["example.com/role"] == "leader"
	})
	if got := labelledPods(t, ns); len(got) != 0 {
		t.Errorf("pods with the default label: %v, want none", got)
	}
}
