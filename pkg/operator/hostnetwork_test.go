package operator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/inject"
)

// A job's copy of a pod, and the pod cache's, keep what chooses the address a hostNetwork pod's agent binds: the
// pod's IP (the node's), never every address of the node. (On the real node, TestHostNetworkPodsAgentBindsThePodIPOnly
// found the job's copy without them: the agent was attached with no --host.)
func TestAJobsPodKeepsWhatBindsAHostNetworkAgent(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n", UID: "u"},
		Spec:   corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.2.3"}}
	trimmed, err := trimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*corev1.Pod{"job": jobPod(pod), "job of the cache's": jobPod(trimmed.(*corev1.Pod)),
		"cache": trimmed.(*corev1.Pod)} {
		if host, err := inject.AgentHost(p); err != nil || host != "10.1.2.3" {
			t.Errorf("%s pod: agent host %q, %v; want the pod's IP", name, host, err)
		}
	}
}
