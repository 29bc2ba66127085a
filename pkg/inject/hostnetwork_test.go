package inject

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A hostNetwork pod's agent binds the pod's IP (the node's): jmx-attach gets --host with it, IPv4 or IPv6; a pod
// with its own network gets no --host (every address of its own namespace); a hostNetwork pod without an IP yet
// is not injected (an error: retried later), by either strategy, before anything reaches the API server.
func TestInjectBindsThePodIPOfAHostNetworkPod(t *testing.T) {
	pod := func(hostNetwork bool, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
			Spec: corev1.PodSpec{HostNetwork: hostNetwork}, Status: corev1.PodStatus{PodIP: ip}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		host string // "" for no --host
	}{
		{"hostNetwork IPv4", pod(true, "10.1.2.3"), "10.1.2.3"},
		{"hostNetwork IPv6", pod(true, "fd00:10:0:0::3"), "fd00:10::3"},
		{"own network", pod(false, "10.244.0.7"), ""},
		{"no pod", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := injectArgs(Target{Pod: tc.pod, ContainerID: "containerd://x"}, Request{Port: 9404}, false)
			i := slices.Index(args, "--host")
			switch {
			case tc.host == "" && i >= 0:
				t.Errorf("args %q bind %q, want every address of the pod's own network", args, args[i+1])
			case tc.host != "" && (i < 0 || i+1 >= len(args) || args[i+1] != tc.host):
				t.Errorf("args %q, want --host %s", args, tc.host)
			}
			host, err := AgentHost(tc.pod)
			if err != nil || host != tc.host {
				t.Errorf("AgentHost = %q, %v; want %q", host, err, tc.host)
			}
		})
	}
	noIP := Target{Pod: pod(true, ""), Container: "app", ContainerID: "containerd://x"}
	if _, err := AgentHost(noIP.Pod); err == nil || !strings.Contains(err.Error(), "has no IP yet") {
		t.Errorf("AgentHost of a hostNetwork pod without an IP: %v", err)
	}
	for _, s := range []Strategy{&EphemeralContainer{}, &Exec{}} {
		if _, err := s.Inject(context.Background(), noIP, Request{Port: 9404, Config: []byte("rules: []\n")}); err == nil ||
			!strings.Contains(err.Error(), "has no IP yet") {
			t.Errorf("%s.Inject of a hostNetwork pod without an IP: %v, want an error", s.Name(), err)
		}
	}
}
