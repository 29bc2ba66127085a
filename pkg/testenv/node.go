package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ErrNodeUnsupported is wrapped by the error Start returns when cluster mode
// (WithNode) cannot run on this machine at all: not root, no overlayfs, no
// runc, no CNI plugins, a missing capability. The message names the cause.
// Tests may skip on it only when the CI environment variable is unset.
var ErrNodeUnsupported = errors.New("testenv: cluster mode unsupported on this machine")

// NodeName is the name of the cluster-mode node. The kubelet takes its
// InternalIP from a hostname override that is an IP address, and it refuses
// a loopback --node-ip, so the node is named after the address the
// apiserver must reach it on.
const NodeName = "127.0.0.1"

// podCIDRBase is the /16 from which each cluster-mode environment takes a /24
// for its pods; the addresses exist only on the environment's own bridge.
const podCIDRBase = "10.88"

// nodeOptions configures cluster mode.
type nodeOptions struct {
	enabled      bool
	serviceProxy bool // WithServiceProxy
	archives     []string
}

// WithNode turns on cluster mode: besides etcd and kube-apiserver, Start runs
// kube-controller-manager, kube-scheduler, containerd (with runc and CNI
// bridge networking) and a kubelet, and returns once the node is Ready. It
// needs root; see ErrNodeUnsupported. Cluster-mode environments take a
// machine-wide lock, so a second one (in this or another test binary) waits
// until the first has stopped. Pods reach Services, the apiserver among
// them, only with WithServiceProxy.
func WithNode() Option {
	return func(o *options) { o.node.enabled = true }
}

// WithImageArchives loads docker-archive or OCI tarballs into the node's
// containerd before Start returns, so pods can use them with
// imagePullPolicy: Never. It implies nothing without WithNode.
func WithImageArchives(files ...string) Option {
	return func(o *options) { o.node.archives = append(o.node.archives, files...) }
}

// unsupported wraps ErrNodeUnsupported with the cause.
func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNodeUnsupported, fmt.Sprintf(format, args...))
}

// SkipOrFail handles an error from Start in a test: it skips the test when
// err says the machine cannot run a cluster-mode node and the CI environment
// variable is unset, and fails it for any other error or under CI=true.
func SkipOrFail(t testing.TB, err error) {
	t.Helper()
	if maySkip(err, os.Getenv("CI")) {
		t.Skipf("skipping (CI unset): %v", err)
	}
	t.Fatalf("%s", prefixed(err))
}

// maySkip says whether a test may skip on err given the CI variable: only
// an unsupported machine, and only outside CI.
func maySkip(err error, ci string) bool {
	return errors.Is(err, ErrNodeUnsupported) && ci == ""
}

// preflight checks what cluster mode needs from the machine before anything
// starts, so that the error names the cause rather than a component's log.
func preflight() error {
	if os.Geteuid() != 0 {
		return unsupported("it needs root (running as uid %d)", os.Geteuid())
	}
	caps, err := effectiveCaps()
	if err != nil {
		return unsupported("cannot read capabilities: %v", err)
	}
	const capNetAdmin, capSysAdmin = 12, 21
	if caps&(1<<capSysAdmin) == 0 {
		return unsupported("CAP_SYS_ADMIN is missing (mounts and namespaces are impossible)")
	}
	if caps&(1<<capNetAdmin) == 0 {
		return unsupported("CAP_NET_ADMIN is missing (the pod bridge cannot be created)")
	}
	fsys, err := os.ReadFile("/proc/filesystems")
	if err != nil || !strings.Contains(string(fsys), "\toverlay\n") {
		return unsupported("the kernel has no overlay filesystem (containerd's overlayfs snapshotter needs it; try modprobe overlay)")
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		return unsupported("no cgroup filesystem at /sys/fs/cgroup")
	}
	if _, err := runcPath(); err != nil {
		return err
	}
	if _, err := cniBinDir(); err != nil {
		return err
	}
	return nil
}

func effectiveCaps() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff line in /proc/self/status")
}

func runcPath() (string, error) {
	for _, p := range []string{"/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc", "/usr/local/bin/runc"} {
		if isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("runc"); err == nil {
		return p, nil
	}
	return "", unsupported("runc not found (apt-get install runc, or `make prereqs`)")
}

// cniBinDir finds the CNI plugins cluster mode uses (Debian's
// containernetworking-plugins puts them in /usr/lib/cni).
func cniBinDir() (string, error) {
	for _, dir := range []string{"/usr/lib/cni", "/opt/cni/bin", "/usr/libexec/cni"} {
		ok := true
		for _, plugin := range []string{"bridge", "host-local", "loopback"} {
			if !isExecutable(filepath.Join(dir, plugin)) {
				ok = false
			}
		}
		if ok {
			return dir, nil
		}
	}
	return "", unsupported("CNI plugins bridge, host-local and loopback not found in /usr/lib/cni or /opt/cni/bin " +
		"(apt-get install containernetworking-plugins, or `make prereqs`)")
}

// node is the cluster-mode part of an Environment.
type node struct {
	dir        string // <env dir>/node
	index      int    // picks the bridge name and the pod /24
	bridge     string
	podCIDR    string
	network    string // CNI network name
	runcRoot   string
	containerd *Process
	ctrSock    string
	ctrBin     string
	kubelet    *Process
	kubeProxy  *Process   // WithServiceProxy only
	controls   []*Process // kube-controller-manager, kube-scheduler
	lock       *os.File
	// createdDirs are host directories outside dir that did not exist
	// before the node started.
	createdDirs []string
	// containers holds the ids runc knew, for cgroup cleanup.
	containers map[string]bool
	// cgroupParentExisted says, per hierarchy, whether /k8s.io was there
	// before the node started.
	cgroupParentExisted map[string]bool
}

// clusterLockPath is the machine-wide lock that serialises cluster-mode
// environments: the kubelet's device-plugin directory and the containerd
// shim socket directory are global.
const clusterLockPath = "/run/handlerkit-testenv-cluster.lock"

// processLock serialises cluster-mode environments within this process
// (flock is per open file, so it would not block a second Start here).
var processLock sync.Mutex

// acquireClusterLock waits, as long as ctx allows, for the machine-wide lock.
// When progress is not nil and another environment holds the lock, it says
// so there once, and once it has the lock, how long it waited (so that a
// test's time in a log can be told apart from its wait).
func acquireClusterLock(ctx context.Context, progress io.Writer) (_ *os.File, err error) {
	start, waited := time.Now(), false
	defer func() {
		if waited && err == nil && progress != nil {
			fmt.Fprintf(progress, "testenv: waited %s for the cluster-mode lock\n", time.Since(start).Round(time.Millisecond))
		}
	}()
	locked := make(chan struct{})
	go func() { processLock.Lock(); close(locked) }()
	select {
	case <-locked:
	case <-time.After(100 * time.Millisecond):
		waited = true
		if progress != nil {
			fmt.Fprintf(progress, "testenv: waiting for another cluster-mode environment of this process to stop\n")
		}
		select {
		case <-locked:
		case <-ctx.Done():
			go func() { <-locked; processLock.Unlock() }()
			return nil, fmt.Errorf("testenv: waiting for another cluster-mode environment of this process to stop: %w", ctx.Err())
		}
	case <-ctx.Done():
		go func() { <-locked; processLock.Unlock() }()
		return nil, fmt.Errorf("testenv: waiting for another cluster-mode environment of this process to stop: %w", ctx.Err())
	}
	f, err := os.OpenFile(clusterLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		processLock.Unlock()
		return nil, fmt.Errorf("testenv: cluster lock: %w", err)
	}
	for waiting := false; ; waiting = true {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			return f, nil
		}
		waited = true
		if !waiting && progress != nil {
			fmt.Fprintf(progress, "testenv: waiting for another test binary's cluster-mode environment to stop (%s)\n", clusterLockPath)
		}
		select {
		case <-ctx.Done():
			f.Close()
			processLock.Unlock()
			return nil, fmt.Errorf("testenv: waiting for another test binary's cluster-mode environment to stop: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// staleLock is the cluster lock file held by removeStaleDirs between
// tryClusterLock and releaseClusterLock.
var staleLock *os.File

// tryClusterLock takes the cluster lock if it is free at once (in this
// process and machine-wide), for removeStaleDirs; releaseClusterLock gives
// it back.
func tryClusterLock() bool {
	if !processLock.TryLock() {
		return false
	}
	f, err := os.OpenFile(clusterLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		processLock.Unlock()
		return false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		processLock.Unlock()
		return false
	}
	staleLock = f
	return true
}

// releaseClusterLock releases what tryClusterLock took.
func releaseClusterLock() {
	if staleLock != nil {
		staleLock.Close()
		staleLock = nil
		processLock.Unlock()
	}
}

func (n *node) releaseLock() {
	if n.lock != nil {
		n.lock.Close() // releases the flock
		n.lock = nil
		processLock.Unlock()
	}
}

// pickNetwork chooses the first index whose bridge does not exist yet.
func (n *node) pickNetwork() error {
	for i := 0; i < 100; i++ {
		name := fmt.Sprintf("hktest%d", i)
		if _, err := os.Stat(filepath.Join("/sys/class/net", name)); errors.Is(err, os.ErrNotExist) {
			n.index = i
			n.bridge = name
			n.podCIDR = fmt.Sprintf("%s.%d.0/24", podCIDRBase, 100+i)
			n.network = "handlerkit-" + name
			return nil
		}
	}
	return errors.New("testenv: no free bridge name hktest0..hktest99")
}

// startNode brings up the node of env. Start calls it once the apiserver is
// ready; on error the caller stops the Environment, which tears down
// whatever was started.
func startNode(ctx context.Context, env *Environment, o options) error {
	n := env.node
	if n == nil {
		// Without the service proxy the network is claimed now; with it,
		// prepareServiceProxy did so before the apiserver started.
		n = &node{dir: filepath.Join(env.dir, "node"), containers: map[string]bool{}}
		env.node = n
		if err := n.claimNetwork(ctx, nil); err != nil {
			return err
		}
	}
	for _, sub := range []string{"containerd/root", "containerd/state", "cni/net.d", "cni/ipam", "kubelet",
		"pod-logs", "volume-plugins", "runc", "certs"} {
		if err := os.MkdirAll(filepath.Join(n.dir, sub), 0o700); err != nil {
			return fmt.Errorf("testenv: %w", err)
		}
	}
	// Paths the kubelet, the shims and libcni hard-code outside the
	// environment; remember which are new so Stop removes exactly those.
	for _, d := range hostDirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			n.createdDirs = append(n.createdDirs, d)
		}
	}
	n.cgroupParentExisted = map[string]bool{}
	var created []string
	for _, h := range cgroupHierarchies() {
		_, err := os.Stat(filepath.Join(h, cgroupParent))
		n.cgroupParentExisted[h] = err == nil
		if err != nil {
			created = append(created, filepath.Join(h, cgroupParent))
		}
	}
	// What this node creates outside its directory, for the next Start's
	// cleanup should this test binary be killed before Stop.
	created = append(created, n.createdDirs...)
	if err := os.WriteFile(filepath.Join(n.dir, "created"), []byte(strings.Join(created, "\n")), 0o600); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	// The controller-manager takes longest to be useful (it mints a
	// credential per controller); start it before the node parts.
	if err := n.startControllers(ctx, env); err != nil {
		return err
	}
	pause, err := pauseArchive(ctx)
	if err != nil {
		return err
	}
	if err := n.startContainerd(ctx, filepath.Join(env.dir, "logs")); err != nil {
		return err
	}
	for _, a := range append([]string{pause}, o.node.archives...) {
		if err := n.importArchive(ctx, a); err != nil {
			return err
		}
	}
	if err := n.writeCNIConfig(o.node.serviceProxy); err != nil {
		return err
	}
	if err := n.startKubelet(ctx, env); err != nil {
		return err
	}
	if o.node.serviceProxy {
		if err := n.startKubeProxy(ctx, env, env.apiPort); err != nil {
			return err
		}
	}
	return n.waitReady(ctx, env)
}

// waitReady waits for the node to be Ready and for the default
// ServiceAccount, without which the ServiceAccount admission plugin refuses
// pods in the default namespace.
func (n *node) waitReady(ctx context.Context, env *Environment) error {
	client, err := kubernetes.NewForConfig(env.Config())
	if err != nil {
		return err
	}
	err = n.kubelet.waitFor(ctx, "Ready", func(ctx context.Context) error {
		node, err := client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s: %s", c.Reason, c.Message)
			}
		}
		return errors.New("node has no Ready condition yet")
	})
	if err != nil {
		return err
	}
	return n.controls[0].waitFor(ctx, "creating the default ServiceAccount", func(ctx context.Context) error {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// stop tears the node down: pods are deleted through the API while the
// kubelet still runs (so containers get SIGTERM and their grace period),
// then the kubelet, leftover containers, containerd and its shims go, and
// finally mounts, the bridge, cgroups and the host paths the kubelet made.
func (n *node) stop(env *Environment) error {
	var errs []error
	// The controllers first, so that no ReplicaSet replaces a deleted pod
	// and no scheduler binds a new one. They keep no state outside the API,
	// so SIGKILL ends them at once, without their graceful shutdown.
	for _, p := range n.controls {
		p.stop(0)
	}
	if n.kubelet != nil {
		if exited, _ := n.kubelet.Exited(); !exited && env.config != nil {
			if err := n.deletePods(env); err != nil {
				errs = append(errs, err)
			}
		}
		n.kubelet.stop(10 * time.Second)
	}
	// kube-proxy and its rules only now: terminating pods may still talk
	// to the apiserver through the kubernetes Service.
	if err := n.stopKubeProxy(env.dir); err != nil {
		errs = append(errs, err)
	}
	n.recordContainers()
	n.killContainers()
	if n.containerd != nil {
		n.containerd.stop(10 * time.Second)
	}
	n.killShims()
	unmountUnder(n.dir)
	errs = append(errs, n.removeHostState()...)
	n.releaseLock()
	return errors.Join(errs...)
}

// deletePods deletes every pod, each with its own grace period but at most
// 5 s, and waits until the kubelet has confirmed their termination (the pods
// disappear from the API), at most 30 s.
func (n *node) deletePods(env *Environment) error {
	client, err := kubernetes.NewForConfig(env.Config())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("testenv: listing pods to delete them: %w", err)
	}
	for _, p := range all.Items {
		// A container that ignores SIGTERM (a shell's sleep as pid 1) holds
		// its pod for the whole grace period; a pod that asks for less than
		// 5 s gets less, but at least 1 s: 0 would delete the pod from the
		// API at once, before the kubelet has stopped its containers.
		grace := int64(5)
		if g := p.Spec.TerminationGracePeriodSeconds; g != nil && *g < grace {
			grace = max(*g, 1)
		}
		err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("testenv: deleting pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	for {
		pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			left := 0
			if pods != nil {
				left = len(pods.Items)
			}
			return fmt.Errorf("testenv: %d pods still terminating after 30s; killing them", left)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
