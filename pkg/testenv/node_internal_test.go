package testenv

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestOnlyAnUnsupportedMachineOutsideCIMaySkip(t *testing.T) {
	unsupportedErr := fmt.Errorf("start: %w", unsupported("it needs root (running as uid 1000)"))
	for _, tc := range []struct {
		name string
		err  error
		ci   string
		want bool
	}{
		{"unsupported without CI", unsupportedErr, "", true},
		{"unsupported under CI", unsupportedErr, "true", false},
		{"other error without CI", errors.New("kubelet exited"), "", false},
		{"other error under CI", errors.New("kubelet exited"), "true", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := maySkip(tc.err, tc.ci); got != tc.want {
				t.Fatalf("maySkip = %v, want %v", got, tc.want)
			}
		})
	}
	if !strings.Contains(unsupportedErr.Error(), "needs root") {
		t.Fatalf("the error must name the cause: %v", unsupportedErr)
	}
}

// TestKubeletConfigCarriesTheMachineSettings guards the settings this
// machine class was found to need; losing one breaks the node only there.
func TestKubeletConfigCarriesTheMachineSettings(t *testing.T) {
	n := &node{dir: "/tmp/env/node", ctrSock: "/tmp/env/node/containerd/containerd.sock"}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(n.kubeletConfig(10250, "/c.crt", "/c.key")), &cfg); err != nil {
		t.Fatalf("kubelet config is not YAML: %v", err)
	}
	for key, want := range map[string]any{
		"failCgroupV1": false, "cgroupDriver": "cgroupfs", "cgroupsPerQOS": false, "failSwapOn": false,
		"imageGCHighThresholdPercent": float64(100), "imageGCLowThresholdPercent": float64(99),
		"address": "127.0.0.1", "readOnlyPort": float64(0),
		"containerRuntimeEndpoint": "unix:///tmp/env/node/containerd/containerd.sock",
	} {
		if got := cfg[key]; got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
	if nodeAlloc, ok := cfg["enforceNodeAllocatable"].([]any); !ok || len(nodeAlloc) != 0 {
		t.Errorf("enforceNodeAllocatable = %v, want []", cfg["enforceNodeAllocatable"])
	}
	if ev, ok := cfg["evictionHard"].(map[string]any); !ok || len(ev) != 0 {
		t.Errorf("evictionHard = %v, want {}", cfg["evictionHard"])
	}
	if authz := cfg["authorization"].(map[string]any); authz["mode"] != "AlwaysAllow" {
		t.Errorf("authorization = %v", authz)
	}
}

func TestContainerdConfigCarriesTheMachineSettings(t *testing.T) {
	n := &node{dir: "/tmp/env/node", ctrSock: "/tmp/env/node/containerd/containerd.sock", runcRoot: "/tmp/env/node/runc"}
	cfg := n.containerdConfig("/usr/sbin/runc", "/usr/lib/cni")
	for _, want := range []string{
		"restrict_oom_score_adj = true", "disable_apparmor = true", `snapshotter = "overlayfs"`,
		`sandbox = "` + pauseRef + `"`, "netns_mounts_under_state_dir = true",
		`root = "/tmp/env/node/containerd/root"`, `state = "/tmp/env/node/containerd/state"`,
		`Root = "/tmp/env/node/runc"`, `stream_server_address = "127.0.0.1"`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("containerd config lacks %s", want)
		}
	}
}
