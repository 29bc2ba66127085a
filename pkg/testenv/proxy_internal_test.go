package testenv

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestKubeProxyConfigLeavesMachineWideSettingsAlone guards the settings
// that keep kube-proxy to its own rules: no conntrack sysctls, no
// route_localnet, no OOM score, NodePorts and listeners on addresses the
// environment owns.
func TestKubeProxyConfigLeavesMachineWideSettingsAlone(t *testing.T) {
	n := &node{podCIDR: "10.88.103.0/24"}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(n.kubeProxyConfig("/k.kubeconfig", 30001, 30002, false)), &cfg); err != nil {
		t.Fatalf("kube-proxy config is not YAML: %v", err)
	}
	for key, want := range map[string]any{
		"mode": "iptables", "hostnameOverride": NodeName, "clusterCIDR": "10.88.103.0/24",
		"detectLocalMode": "ClusterCIDR", "oomScoreAdj": float64(0),
		"healthzBindAddress": "127.0.0.1:30001", "metricsBindAddress": "127.0.0.1:30002",
		"nodePortAddresses": []any{"10.88.103.1/32"},
		"conntrack": map[string]any{"maxPerCore": float64(0), "min": float64(0),
			"tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
	} {
		if got := cfg[key]; !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v, want %#v", key, got, want)
		}
	}
	iptables, _ := cfg["iptables"].(map[string]any)
	if iptables["localhostNodePorts"] != false || iptables["masqueradeAll"] != false {
		t.Errorf("iptables = %v, want localhostNodePorts and masqueradeAll false", iptables)
	}
}

// TestCNIConfigRoutesOnlyTheServiceRangeWithTheServiceProxy checks that pods
// get a route to the Service range through the gateway with the service
// proxy, and no route at all without it.
func TestCNIConfigRoutesOnlyTheServiceRangeWithTheServiceProxy(t *testing.T) {
	for _, proxy := range []bool{false, true} {
		dir := t.TempDir()
		n := &node{dir: dir, bridge: "hktest7", network: "handlerkit-hktest7", podCIDR: "10.88.107.0/24"}
		if err := os.MkdirAll(filepath.Join(dir, "cni", "net.d"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := n.writeCNIConfig(proxy); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, "cni", "net.d", "10-handlerkit.conflist"))
		if err != nil {
			t.Fatal(err)
		}
		var conf struct {
			Plugins []struct {
				Type string
				IPAM struct {
					Routes []map[string]string
				}
			}
		}
		if err := json.Unmarshal(data, &conf); err != nil {
			t.Fatalf("CNI config is not JSON: %v\n%s", err, data)
		}
		routes := conf.Plugins[0].IPAM.Routes
		if want := []map[string]string{{"dst": serviceCIDR}}; proxy && !reflect.DeepEqual(routes, want) {
			t.Errorf("with the service proxy: routes %v, want %v", routes, want)
		}
		if !proxy && len(routes) != 0 {
			t.Errorf("without the service proxy: routes %v, want none", routes)
		}
	}
	if got := (&node{podCIDR: "10.88.107.0/24"}).gatewayIP(); got != "10.88.107.1" {
		t.Errorf("gatewayIP = %s, want 10.88.107.1", got)
	}
}
