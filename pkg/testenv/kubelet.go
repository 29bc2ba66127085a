package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/handlerkit/handlerkit/pkg/images/testimages"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// pauseRef is the sandbox image containerd runs for every pod.
const pauseRef = testimages.PauseRef

// pauseMu guards pauseFile, the pause archive built by this process: it is
// built once per test binary, so that it always matches cmd/pause.
var (
	pauseMu   sync.Mutex
	pauseFile string
)

// pauseArchive builds the pause image (a static Go binary, seconds with a
// warm build cache) into the image cache and returns the archive.
func pauseArchive(ctx context.Context) (string, error) {
	pauseMu.Lock()
	defer pauseMu.Unlock()
	if pauseFile != "" {
		if _, err := os.Stat(pauseFile); err == nil {
			return pauseFile, nil
		}
	}
	dir, err := testimages.DefaultCacheDir()
	if err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	a, err := testimages.BuildPause(ctx, dir)
	if err != nil {
		return "", fmt.Errorf("testenv: building the pause image: %w", err)
	}
	pauseFile = a.File
	return a.File, nil
}

// writeKubeconfig writes a kubeconfig for a client certificate of user in
// groups, signed by the environment's CA.
func writeKubeconfig(env *Environment, file, user string, groups ...string) error {
	pair, err := env.ca.client(user, groups)
	if err != nil {
		return err
	}
	data, err := clientcmd.Write(kubeconfigFor(&rest.Config{
		Host:            env.config.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: env.ca.certPEM, CertData: pair.certPEM, KeyData: pair.keyPEM},
	}))
	if err == nil {
		err = writePrivateFile(file, data)
	}
	if err != nil {
		return fmt.Errorf("testenv: writing kubeconfig for %s: %w", user, err)
	}
	return nil
}

// startControllers starts kube-controller-manager (with a ServiceAccount
// credential per controller, as kubeadm does, so each controller gets
// exactly its bootstrap RBAC role) and kube-scheduler, each with its own
// client certificate, on loopback.
func (n *node) startControllers(ctx context.Context, env *Environment) error {
	logs := filepath.Join(env.dir, "logs")
	certs := filepath.Join(n.dir, "certs")
	kcmBin, err := Binary(ctx, "kube-controller-manager")
	if err != nil {
		return err
	}
	schedBin, err := Binary(ctx, "kube-scheduler")
	if err != nil {
		return err
	}
	kcmConfig := filepath.Join(certs, "controller-manager.kubeconfig")
	if err := writeKubeconfig(env, kcmConfig, "system:kube-controller-manager"); err != nil {
		return err
	}
	schedConfig := filepath.Join(certs, "scheduler.kubeconfig")
	if err := writeKubeconfig(env, schedConfig, "system:kube-scheduler"); err != nil {
		return err
	}
	kcmPort, err := freePort()
	if err != nil {
		return err
	}
	schedPort, err := freePort()
	if err != nil {
		return err
	}
	env.ports = append(env.ports, kcmPort, schedPort)
	certDir := filepath.Join(env.dir, "certs")
	kcm, err := startProcess("kube-controller-manager", kcmBin, logs, []string{
		"--kubeconfig=" + kcmConfig,
		"--authentication-kubeconfig=" + kcmConfig,
		"--authorization-kubeconfig=" + kcmConfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(kcmPort),
		"--cert-dir=" + filepath.Join(n.dir, "certs", "kcm-serving"),
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--root-ca-file=" + filepath.Join(certDir, "ca.crt"),
		"--service-account-private-key-file=" + filepath.Join(certDir, "service-account.key"),
		"--cluster-name=handlerkit-testenv",
		// One node, no cloud: neither CIDR allocation nor routes.
		"--allocate-node-cidrs=false",
		"--configure-cloud-routes=false",
		"--controllers=*,-cloud-node-lifecycle-controller,-node-route-controller,-service-lb-controller",
		"--profiling=false",
		"-v=1",
	}, nil)
	if err != nil {
		return err
	}
	n.controls = append(n.controls, kcm)
	sched, err := startProcess("kube-scheduler", schedBin, logs, []string{
		"--kubeconfig=" + schedConfig,
		"--authentication-kubeconfig=" + schedConfig,
		"--authorization-kubeconfig=" + schedConfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(schedPort),
		"--cert-dir=" + filepath.Join(n.dir, "certs", "scheduler-serving"),
		"--leader-elect=false",
		"--profiling=false",
		"-v=1",
	}, nil)
	if err != nil {
		return err
	}
	n.controls = append(n.controls, sched)
	return nil
}

// kubeletConfig is the KubeletConfiguration for this machine class: cgroup v1
// allowed (kubelet 1.36 refuses it otherwise), cgroupfs without QoS cgroups,
// no node-allocatable enforcement, swap tolerated, no eviction and no image
// GC (thresholds 100/99), and an anonymous, AlwaysAllow API on loopback only.
func (n *node) kubeletConfig(port int, servingCert, servingKey string) string {
	q := strconv.Quote
	return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: ` + strconv.Itoa(port) + `
readOnlyPort: 0
healthzPort: 0
tlsCertFile: ` + q(servingCert) + `
tlsPrivateKeyFile: ` + q(servingKey) + `
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: ` + q("unix://"+n.ctrSock) + `
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
podLogsDir: ` + q(filepath.Join(n.dir, "pod-logs")) + `
volumePluginDir: ` + q(filepath.Join(n.dir, "volume-plugins")) + `
resolvConf: ""
registerNode: true
serializeImagePulls: false
nodeStatusUpdateFrequency: 2s
nodeStatusReportFrequency: 10s
syncFrequency: 10s
fileCheckFrequency: 5s
maxPods: 110
`
}

func (n *node) startKubelet(ctx context.Context, env *Environment) error {
	bin, err := Binary(ctx, "kubelet")
	if err != nil {
		return err
	}
	certs := filepath.Join(n.dir, "certs")
	kubeconfig := filepath.Join(certs, "kubelet.kubeconfig")
	// The Node authorizer and NodeRestriction know the kubelet by this name.
	if err := writeKubeconfig(env, kubeconfig, "system:node:"+NodeName, "system:nodes"); err != nil {
		return err
	}
	serving, err := env.ca.serving([]string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return err
	}
	servingCert, servingKey, err := serving.write(certs, "kubelet-serving")
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	env.ports = append(env.ports, port)
	cfg := filepath.Join(n.dir, "kubelet-config.yaml")
	if err := os.WriteFile(cfg, []byte(n.kubeletConfig(port, servingCert, servingKey)), 0o600); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	p, err := startProcess("kubelet", bin, filepath.Join(env.dir, "logs"), []string{
		"--config=" + cfg,
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + filepath.Join(n.dir, "kubelet"),
		"--cert-dir=" + filepath.Join(certs, "kubelet-certs"),
		// An IP as hostname becomes the InternalIP without the loopback
		// check --node-ip applies; the apiserver then reaches the kubelet
		// on 127.0.0.1 (--kubelet-preferred-address-types=InternalIP).
		"--hostname-override=" + NodeName,
		"-v=1",
	}, nil)
	if err != nil {
		return err
	}
	n.kubelet = p
	return nil
}
