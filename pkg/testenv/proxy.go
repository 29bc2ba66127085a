package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// KubernetesServiceIP is the ClusterIP of the kubernetes Service in
// default, the first address of the environment's service range: pods
// find it in $KUBERNETES_SERVICE_HOST (port 443), as rest.InClusterConfig
// expects. Only WithServiceProxy makes it reachable.
const KubernetesServiceIP = "10.0.0.1"

// serviceCIDR is the apiserver's --service-cluster-ip-range.
const serviceCIDR = "10.0.0.0/24"

// proxyRulesMarker exists while kube-proxy rules of a testenv may be in the
// host's iptables: written before kube-proxy starts, removed once
// `kube-proxy --cleanup` has succeeded. A service-proxy Start that finds it
// (under the cluster lock, so no live environment owns the rules) cleans up
// after a test binary that was killed before Stop.
const proxyRulesMarker = "/run/handlerkit-testenv-kube-proxy.rules"

// WithServiceProxy turns on cluster mode (it implies WithNode) with Services
// that work from pods as on a real cluster: the apiserver listens on the
// gateway address of the node's bridge instead of loopback, the endpoint
// reconciler points the kubernetes Service at it, and a real kube-proxy (in
// iptables mode) routes ClusterIPs, among them KubernetesServiceIP:443. A
// pod then reaches the apiserver through rest.InClusterConfig with its
// ServiceAccount token and the environment's CA, with no hostNetwork and no
// DNS; the apiserver's certificate is valid for KubernetesServiceIP,
// kubernetes.default.svc and the gateway address.
//
// Host-side clients (Config, Clientset, kubeconfigs) use the gateway address
// too, which is local to the machine. kube-proxy's rules are machine-global,
// so Start needs the iptables commands (ErrNodeUnsupported names them when
// missing), and the wait for the cluster-mode lock, which one environment
// holds from Start to Stop, comes before the start timeout and prints a
// progress line. Stop removes the rules with `kube-proxy --cleanup`; the
// next service-proxy Start removes those of a test binary killed before
// Stop.
func WithServiceProxy() Option {
	return func(o *options) {
		o.node.enabled = true
		o.node.serviceProxy = true
	}
}

// proxyPreflight checks what the service proxy needs beyond cluster mode:
// kube-proxy's iptables mode runs iptables, iptables-save and
// iptables-restore from PATH.
func proxyPreflight() error {
	for _, cmd := range []string{"iptables", "iptables-save", "iptables-restore"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return unsupported("%s not found in PATH; kube-proxy (WithServiceProxy) needs it "+
				"(apt-get install iptables, or `make prereqs`)", cmd)
		}
	}
	return nil
}

// nodeBinaries lists the binaries cluster mode with o needs.
func nodeBinaries(o options) []string {
	var names []string
	for _, name := range NodeBinaries() {
		if name != "kube-proxy" || o.node.serviceProxy {
			names = append(names, name)
		}
	}
	return names
}

// gatewayIP is the first address of the node's pod /24, which the bridge
// holds (the CNI bridge plugin's isGateway address).
func (n *node) gatewayIP() string {
	return strings.TrimSuffix(n.podCIDR, ".0/24") + ".1"
}

// claimNetwork takes the cluster-mode lock (unless held already) and picks
// the bridge name and pod /24, recording the name before the bridge exists
// so that a later Start can tell whose it is.
func (n *node) claimNetwork(ctx context.Context, progress io.Writer) error {
	if n.lock == nil {
		lock, err := acquireClusterLock(ctx, progress)
		if err != nil {
			return err
		}
		n.lock = lock
	}
	// Under the lock, killed nodes' leftovers can go without racing another
	// environment for a bridge name.
	removeStaleDirs(true)
	removeOrphanBridges()
	if err := n.pickNetwork(); err != nil {
		return err
	}
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	if err := os.WriteFile(filepath.Join(n.dir, "bridge"), []byte(n.bridge), 0o600); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	return nil
}

// createBridge makes the node's bridge with the gateway address before the
// apiserver starts, so that it can listen there. The CNI bridge plugin
// takes an existing bridge as it is when it already holds exactly the
// gateway address with the range's prefix length, and adds the pods' veths.
func (n *node) createBridge() error {
	for _, args := range [][]string{
		{"link", "add", "name", n.bridge, "type", "bridge"},
		{"addr", "add", n.gatewayIP() + "/24", "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("testenv: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// prepareServiceProxy gives a service-proxy environment its network before
// the control plane starts: the cluster-mode lock (waited for with the
// caller's context, not the start timeout), the bridge with the gateway
// address the apiserver will listen on, and no kube-proxy rules left by a
// killed test binary.
func prepareServiceProxy(ctx context.Context, env *Environment) error {
	n := &node{dir: filepath.Join(env.dir, "node"), containers: map[string]bool{}}
	env.node = n
	if err := n.claimNetwork(ctx, os.Stderr); err != nil {
		return err
	}
	if _, err := os.Stat(proxyRulesMarker); err == nil {
		if err := cleanupProxyRules(ctx, env.dir); err != nil {
			return err
		}
	}
	return n.createBridge()
}

// kubeProxyConfig is kube-proxy's configuration: iptables mode, the node's
// pods as the cluster CIDR, NodePorts only on the gateway address, health
// and metrics on loopback, and none of the machine-global settings it would
// otherwise change (conntrack limits and timeouts, route_localnet for
// localhost NodePorts, an OOM score).
func (n *node) kubeProxyConfig(kubeconfig string, healthzPort, metricsPort int, masqueradeAll bool) string {
	q := strconv.Quote
	return `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: ` + q(kubeconfig) + `
hostnameOverride: ` + q(NodeName) + `
healthzBindAddress: ` + q("127.0.0.1:"+strconv.Itoa(healthzPort)) + `
metricsBindAddress: ` + q("127.0.0.1:"+strconv.Itoa(metricsPort)) + `
mode: iptables
iptables:
  localhostNodePorts: false
  masqueradeAll: ` + strconv.FormatBool(masqueradeAll) + `
  minSyncPeriod: 100ms
  syncPeriod: 30s
detectLocalMode: ClusterCIDR
clusterCIDR: ` + q(n.podCIDR) + `
nodePortAddresses: [` + q(n.gatewayIP()+"/32") + `]
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
logging:
  verbosity: 1
`
}

// bridgeNetfilter reports whether bridged traffic passes iptables, which a
// reply from one pod to another on the same bridge needs to be translated
// back from a ClusterIP. Without it, kube-proxy masquerades all Service
// traffic instead (the pods then see the gateway as the client).
func bridgeNetfilter() bool {
	b, err := os.ReadFile("/proc/sys/net/bridge/bridge-nf-call-iptables")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// startKubeProxy runs kube-proxy as the node's host process and waits
// until it routes the kubernetes Service to the apiserver.
func (n *node) startKubeProxy(ctx context.Context, env *Environment, apiPort int) error {
	bin, err := Binary(ctx, "kube-proxy")
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(n.dir, "certs", "kube-proxy.kubeconfig")
	// Bootstrap RBAC binds system:node-proxier to this user.
	if err := writeKubeconfig(env, kubeconfig, "system:kube-proxy"); err != nil {
		return err
	}
	healthz, err := freePort()
	if err != nil {
		return err
	}
	metrics, err := freePort()
	if err != nil {
		return err
	}
	env.ports = append(env.ports, healthz, metrics)
	cfg := filepath.Join(n.dir, "kube-proxy-config.yaml")
	if err := os.WriteFile(cfg, []byte(n.kubeProxyConfig(kubeconfig, healthz, metrics, !bridgeNetfilter())), 0o600); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	if err := os.WriteFile(proxyRulesMarker, []byte(env.dir), 0o600); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	p, err := startProcess("kube-proxy", bin, filepath.Join(env.dir, "logs"), []string{"--config=" + cfg}, nil)
	if err != nil {
		return err
	}
	n.kubeProxy = p
	endpoint := "--to-destination " + net.JoinHostPort(n.gatewayIP(), strconv.Itoa(apiPort))
	return p.waitFor(ctx, "routing the kubernetes Service", func(ctx context.Context) error {
		if err := kubeProxyHealthy(ctx, healthz); err != nil {
			return err
		}
		out, err := exec.CommandContext(ctx, "iptables-save", "-t", "nat").Output()
		if err != nil {
			return fmt.Errorf("iptables-save: %w", err)
		}
		if !strings.Contains(string(out), endpoint) {
			return fmt.Errorf("no rule DNATs to the apiserver (%s) yet", endpoint)
		}
		return nil
	})
}

func kubeProxyHealthy(ctx context.Context, port int) error {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/healthz", port), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kube-proxy /healthz: %s", resp.Status)
	}
	return nil
}

// stopKubeProxy ends kube-proxy and removes its rules from the host (when
// the marker says this environment may have written some).
func (n *node) stopKubeProxy(dir string) error {
	if n.kubeProxy != nil {
		n.kubeProxy.stop(10 * time.Second)
	}
	if owner, err := os.ReadFile(proxyRulesMarker); err != nil || string(owner) != dir {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return cleanupProxyRules(ctx, dir)
}

// cleanupProxyRules runs `kube-proxy --cleanup`, which removes the rules of
// every kube-proxy mode (iptables, ipvs, nftables) for both IP families,
// and then the marker. The caller holds the cluster-mode lock. Its output
// goes to <dir>/logs/kube-proxy-cleanup.log when dir has a logs directory.
func cleanupProxyRules(ctx context.Context, dir string) error {
	bin, err := Binary(ctx, "kube-proxy")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, "--cleanup", "-v=1")
	out, err := cmd.CombinedOutput()
	if logs := filepath.Join(dir, "logs"); dir != "" {
		if _, statErr := os.Stat(logs); statErr == nil {
			_ = os.WriteFile(filepath.Join(logs, "kube-proxy-cleanup.log"), out, 0o600)
		}
	}
	if err != nil {
		return fmt.Errorf("testenv: kube-proxy --cleanup: %w\n%s", err, tail(out, 20))
	}
	if err := os.Remove(proxyRulesMarker); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("testenv: %w", err)
	}
	return nil
}
