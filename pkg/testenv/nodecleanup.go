package testenv

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hostDirs are directories outside the environment that the kubelet,
// containerd's shims or the CNI library create on their own; Stop removes
// the ones that did not exist before the environment started.
var hostDirs = []string{
	"/var/lib/kubelet", "/var/lib/kubelet/device-plugins", "/var/log/containers", "/var/log/pods",
	"/var/lib/cni", "/run/containerd",
}

// recordContainers remembers the ids of every container runc knows in this
// environment, so that their cgroups can be removed after they are gone.
func (n *node) recordContainers() {
	if n.runcRoot == "" {
		return
	}
	entries, _ := os.ReadDir(filepath.Join(n.runcRoot, "k8s.io"))
	for _, e := range entries {
		n.containers[e.Name()] = true
	}
}

// killContainers force-deletes containers the kubelet left running (it
// normally stops them all when the pods are deleted).
func (n *node) killContainers() {
	if n.runcRoot == "" {
		return
	}
	runc, err := runcPath()
	if err != nil {
		return
	}
	root := filepath.Join(n.runcRoot, "k8s.io")
	for id := range n.containers {
		cmd := exec.Command(runc, "--root", root, "delete", "--force", id)
		_ = cmd.Run()
	}
}

// killShims kills the containerd shims of this environment: they run in
// their own process groups, so stopping containerd does not reach them.
// Their children, the containers (whose state may be gone when a killed
// test binary left them), go first, and their sockets in containerd's
// global state directory after them.
func (n *node) killShims() {
	if n.ctrSock == "" {
		return
	}
	shims := processesWithArg(n.ctrSock)
	for _, shim := range shims {
		for round := 0; round < 10; round++ {
			kids := childrenOf(shim)
			if len(kids) == 0 {
				break
			}
			for _, kid := range kids {
				for _, id := range containerCgroupIDs(kid) {
					n.containers[id] = true
				}
				_ = syscall.Kill(kid, syscall.SIGKILL)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if sock := shimSocket(shim); sock != "" {
			defer os.Remove(sock)
		}
		_ = syscall.Kill(shim, syscall.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && len(processesWithArg(n.ctrSock)) > 0 {
		time.Sleep(20 * time.Millisecond)
	}
}

// childrenOf lists the pids whose parent is pid.
func childrenOf(pid int) []int {
	var kids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name in parentheses may hold spaces; fields follow it.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			kids = append(kids, child)
		}
	}
	return kids
}

// containerCgroupIDs returns the container ids in pid's /k8s.io/<id> cgroups.
func containerCgroupIDs(pid int) []string {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var ids []string
	for _, line := range strings.Split(string(data), "\n") {
		if _, rest, ok := strings.Cut(line, "/"+cgroupParent+"/"); ok {
			id := strings.SplitN(rest, "/", 2)[0]
			if id != "" && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// shimSocket returns the socket a shim serves on, which containerd derives
// from its own address, the namespace and the id (pkg/shim.SocketAddress).
func shimSocket(pid int) string {
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return ""
	}
	args := strings.Split(string(cmdline), "\x00")
	flag := map[string]string{}
	for i := 0; i+1 < len(args); i++ {
		if strings.HasPrefix(args[i], "-") {
			flag[strings.TrimLeft(args[i], "-")] = args[i+1]
		}
	}
	if flag["address"] == "" || flag["namespace"] == "" || flag["id"] == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(filepath.Join(flag["address"], flag["namespace"], flag["id"])))
	return filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:]))
}

// processesWithArg lists the pids whose command line holds arg exactly.
func processesWithArg(arg string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range bytes.Split(cmdline, []byte{0}) {
			if string(a) == arg {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	for _, p := range mountsUnder(dir) {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// mountsUnder returns the mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	for i, j := 0, len(points)-1; i < j; i, j = i+1, j-1 {
		points[i], points[j] = points[j], points[i]
	}
	return points
}

// removeHostState removes what lives outside the environment's directory:
// the bridge, the containers' cgroups, and the host directories and files
// the node created.
func (n *node) removeHostState() []error {
	var errs []error
	if n.bridge != "" {
		if _, err := os.Stat(filepath.Join("/sys/class/net", n.bridge)); err == nil {
			if out, err := exec.Command("ip", "link", "delete", n.bridge).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("testenv: deleting bridge %s: %v: %s", n.bridge, err, out))
			}
		}
	}
	errs = append(errs, n.removeCgroups()...)
	// Log symlinks the kubelet made in a /var/log/containers that existed.
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, n.dir+"/") {
			os.Remove(l)
		}
	}
	// libcni caches results per network and container.
	cached, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", n.network+"-*"))
	for _, c := range cached {
		os.Remove(c)
	}
	for i := len(n.createdDirs) - 1; i >= 0; i-- {
		d := n.createdDirs[i]
		if len(mountsUnder(d)) > 0 {
			errs = append(errs, fmt.Errorf("testenv: %s still has mounts; left in place", d))
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("testenv: removing %s: %w", d, err))
		}
	}
	return errs
}

// cgroupParent is where containerd puts containers when the kubelet (with
// cgroupsPerQOS false) names no parent: /<containerd namespace>/<id>.
const cgroupParent = "k8s.io"

// removeCgroups removes the cgroup of every container of this environment
// in every v1 hierarchy (or the v2 tree), and the k8s.io parent when the
// environment created it.
func (n *node) removeCgroups() []error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		for id := range n.containers {
			dir := filepath.Join(h, cgroupParent, id)
			if err := removeCgroup(dir); err != nil {
				errs = append(errs, err)
			}
		}
		if existed, known := n.cgroupParentExisted[h]; known && !existed {
			_ = removeCgroup(filepath.Join(h, cgroupParent))
		}
	}
	return errs
}

// removeCgroup removes a cgroup directory and its children, deepest first.
// A cgroup can only be removed once its processes are gone, which may take
// a moment after they were killed.
func removeCgroup(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var last error
	for i := len(dirs) - 1; i >= 0; i-- {
		deadline := time.Now().Add(5 * time.Second)
		for {
			last = syscall.Rmdir(dirs[i])
			if last == nil || errors.Is(last, syscall.ENOENT) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if last != nil && !errors.Is(last, syscall.ENOENT) {
		return fmt.Errorf("testenv: removing cgroup %s: %w", dir, last)
	}
	return nil
}

// cgroupHierarchies lists the mounted cgroup hierarchies (one per v1
// controller set, or the single v2 tree).
func cgroupHierarchies() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		line := s.Text()
		sep := strings.Index(line, " - ")
		if sep < 0 {
			continue
		}
		fields := strings.Fields(line[:sep])
		fstype := strings.Fields(line[sep+3:])
		if len(fields) > 4 && len(fstype) > 0 && (fstype[0] == "cgroup" || fstype[0] == "cgroup2") {
			out = append(out, fields[4])
		}
	}
	return out
}

// cleanStaleNode tears down what a cluster-mode environment of a test binary
// that was killed before Stop left behind in dir: its shims and containers,
// mounts and bridge. Processes it started died with it (Pdeathsig), but the
// shims and containers are designed to outlive containerd.
func cleanStaleNode(dir string) {
	nodeDir := filepath.Join(dir, "node")
	if _, err := os.Stat(nodeDir); err != nil {
		return
	}
	n := &node{dir: nodeDir, containers: map[string]bool{},
		ctrSock: filepath.Join(nodeDir, "containerd", "containerd.sock"), runcRoot: filepath.Join(nodeDir, "runc")}
	if b, err := os.ReadFile(filepath.Join(nodeDir, "bridge")); err == nil {
		n.bridge = strings.TrimSpace(string(b))
		n.network = "handlerkit-" + n.bridge
		if bridgeClaimed(n.bridge, dir) {
			// A live environment has taken the name since; its bridge.
			n.bridge = ""
		}
	}
	n.recordContainers()
	n.killContainers()
	n.killShims()
	unmountUnder(nodeDir)
	created := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(nodeDir, "created")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			created[line] = true
		}
	}
	n.cgroupParentExisted = map[string]bool{}
	for _, h := range cgroupHierarchies() {
		n.cgroupParentExisted[h] = !created[filepath.Join(h, cgroupParent)]
	}
	for _, d := range hostDirs {
		if created[d] {
			n.createdDirs = append(n.createdDirs, d)
		}
	}
	_ = n.removeHostState()
}

// isNodeDir reports whether an environment directory holds a cluster-mode node.
func isNodeDir(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "node"))
	return err == nil
}

// removeOrphanBridges deletes hktest* bridges that no live environment
// claims: a node writes its bridge name before the bridge exists, so an
// unclaimed one belongs to a node whose directory is gone.
func removeOrphanBridges() {
	links, _ := filepath.Glob("/sys/class/net/hktest*")
	for _, l := range links {
		name := filepath.Base(l)
		if !bridgeClaimed(name, "") {
			_ = exec.Command("ip", "link", "delete", name).Run()
		}
	}
}

// bridgeClaimed reports whether an environment other than the one in dir,
// whose owner is alive, uses the bridge name.
func bridgeClaimed(bridge, dir string) bool {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, other := range dirs {
		if other == dir {
			continue
		}
		b, err := os.ReadFile(filepath.Join(other, "node", "bridge"))
		if err != nil || strings.TrimSpace(string(b)) != bridge {
			continue
		}
		data, err := os.ReadFile(filepath.Join(other, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err == nil && (pid == os.Getpid() || syscall.Kill(pid, 0) == nil) {
			return true
		}
	}
	return false
}
