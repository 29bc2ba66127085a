package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// containerdConfig is containerd 2.x's configuration (version 3) with every
// path under the environment and the settings this machine class needs:
// restrict_oom_score_adj because the VM lacks CAP_SYS_RESOURCE (runc fails
// with "can't get final child's PID from pipe" otherwise), no AppArmor, the
// overlayfs snapshotter and the locally built pause image pinned as sandbox.
func (n *node) containerdConfig(runc, cniBin string) string {
	q := strconv.Quote
	c := filepath.Join(n.dir, "containerd")
	return `version = 3
root = ` + q(filepath.Join(c, "root")) + `
state = ` + q(filepath.Join(c, "state")) + `
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
  "io.containerd.nri.v1.nri",
]

[grpc]
  address = ` + q(n.ctrSock) + `

[ttrpc]
  address = ` + q(n.ctrSock+".ttrpc") + `

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = ` + q(pauseRef) + `

  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    disable_apparmor = true
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_cdi = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = ` + q(runc) + `
          Root = ` + q(n.runcRoot) + `
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [` + q(cniBin) + `]
      conf_dir = ` + q(filepath.Join(n.dir, "cni", "net.d")) + `
      max_conf_num = 1

  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
`
}

func (n *node) startContainerd(ctx context.Context, logs string) error {
	bin, err := Binary(ctx, "containerd")
	if err != nil {
		return err
	}
	if _, err := Binary(ctx, "containerd-shim-runc-v2"); err != nil {
		return err
	}
	if n.ctrBin, err = Binary(ctx, "ctr"); err != nil {
		return err
	}
	runc, err := runcPath()
	if err != nil {
		return err
	}
	cniBin, err := cniBinDir()
	if err != nil {
		return err
	}
	n.ctrSock = filepath.Join(n.dir, "containerd", "containerd.sock")
	n.runcRoot = filepath.Join(n.dir, "runc")
	cfg := filepath.Join(n.dir, "containerd", "config.toml")
	if err := os.WriteFile(cfg, []byte(n.containerdConfig(runc, cniBin)), 0o600); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	// containerd starts its shims from PATH; put the cached shim first.
	path := ContainerdDir() + string(os.PathListSeparator) + os.Getenv("PATH")
	p, err := startProcess("containerd", bin, logs, []string{"--config", cfg, "--log-level", "warn"}, []string{"PATH=" + path})
	if err != nil {
		return err
	}
	n.containerd = p
	return p.waitFor(ctx, "serving", func(ctx context.Context) error {
		_, err := n.ctr(ctx, "version")
		return err
	})
}

// ctr runs the ctr client against this node's containerd in the k8s.io
// namespace, where the CRI plugin keeps images and containers.
func (n *node) ctr(ctx context.Context, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, n.ctrBin, append([]string{"--address", n.ctrSock, "--namespace", "k8s.io"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// importArchive loads a docker-archive or OCI tarball and unpacks it for the
// overlayfs snapshotter, so the kubelet finds it without pulling.
func (n *node) importArchive(ctx context.Context, file string) error {
	if _, err := os.Stat(file); err != nil {
		return fmt.Errorf("testenv: image archive: %w", err)
	}
	if _, err := n.ctr(ctx, "images", "import", "--snapshotter", "overlayfs", file); err != nil {
		return fmt.Errorf("testenv: importing %s: %w", file, err)
	}
	return nil
}

// writeCNIConfig gives pods a veth on this environment's own bridge and an
// address from its /24. No masquerading and no port mapping: pods talk to the
// host through the bridge and nothing else. With the service proxy, pods
// also route the Service range to the gateway, where kube-proxy translates
// it; there is still no default route.
func (n *node) writeCNIConfig(serviceProxy bool) error {
	routes := ""
	if serviceProxy {
		routes = fmt.Sprintf(",\n        \"routes\": [{\"dst\": %q}]", serviceCIDR)
	}
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "dataDir": %q%s
      }
    },
    {"type": "loopback"}
  ]
}
`, n.network, n.bridge, n.podCIDR, filepath.Join(n.dir, "cni", "ipam"), routes)
	return os.WriteFile(filepath.Join(n.dir, "cni", "net.d", "10-handlerkit.conflist"), []byte(conf), 0o600)
}
