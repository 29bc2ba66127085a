package jvm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

const (
	idA = "4b8f0e7f0a7c6d1e2f3a4b5c6d7e8f90112233445566778899aabbccddeeff00"
	// idB begins with the first 12 digits of idA, the short form tools print, and differs after.
	idB = "4b8f0e7f0a7c00000000000000000000000000000000000000000000000000ff"
	pod = "pod0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
)

// v1 writes a cgroup v1 /proc/<pid>/cgroup with every hierarchy at p (and the unified line of a hybrid system).
func v1(p string) string {
	var b strings.Builder
	for i, c := range []string{"name=systemd", "pids", "blkio", "freezer", "devices", "memory", "cpuset", "cpu,cpuacct", "net_cls,net_prio", "perf_event", "hugetlb"} {
		b.WriteString(strconv.Itoa(12-i) + ":" + c + ":" + p + "\n")
	}
	b.WriteString("0::/\n")
	return b.String()
}

func v2(p string) string { return "0::" + p + "\n" }

// TestContainerMatchesTheCgroupsOfEachRuntime reads /proc/<pid>/cgroup as the kernel writes it for the
// processes of a container under containerd (cgroupfs and systemd drivers), CRI-O, cri-dockerd, cgroup v1 and
// v2, from the node and from a private cgroup namespace, and for processes outside it.
func TestContainerMatchesTheCgroupsOfEachRuntime(t *testing.T) {
	sdPod := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b1c2d3e_4f50_6172_8394_a5b6c7d8e9f0.slice/"
	for _, tc := range []struct {
		name   string
		self   string // jmx-attach's own cgroup file
		cgroup string
		want   bool
	}{
		{"containerd cgroupfs v1", v1("/"), v1("/kubepods/burstable/" + pod + "/" + idA), true},
		{"containerd cgroupfs v2", v2("/"), v2("/kubepods/burstable/" + pod + "/" + idA), true},
		{"containerd systemd v1", v1("/"), v1(sdPod + "cri-containerd-" + idA + ".scope"), true},
		{"containerd systemd v2", v2("/"), v2(sdPod + "cri-containerd-" + idA + ".scope"), true},
		{"CRI-O systemd v2", v2("/"), v2(sdPod + "crio-" + idA + ".scope"), true},
		{"CRI-O cgroupfs v1", v1("/"), v1("/kubepods/besteffort/" + pod + "/crio-" + idA), true},
		{"CRI-O crun sub-cgroup v2", v2("/"), v2(sdPod + "crio-" + idA + ".scope/container"), true},
		{"CRI-O conmon is outside", v2("/"), v2(sdPod + "crio-conmon-" + idA + ".scope"), false},
		{"cri-dockerd systemd v2", v2("/"), v2(sdPod + "docker-" + idA + ".scope"), true},
		{"cri-dockerd cgroupfs v1", v1("/"), v1("/kubepods/" + pod + "/" + idA), true},
		{"testenv node v1", v1("/"), v1("/k8s.io/" + idA), true},
		// An ephemeral container's private cgroup namespace: the JVM's cgroup is outside its root.
		{"ephemeral container v2", v2("/"), v2("/../cri-containerd-" + idA + ".scope"), true},
		{"ephemeral container v2 cgroupfs", v2("/"), v2("/../" + idA), true},
		{"another container of the pod v2", v2("/"), v2("/../cri-containerd-" + idB + ".scope"), false},
		{"another container of the pod v1", v1("/"), v1("/kubepods/burstable/" + pod + "/" + idB), false},
		{"the pod's sandbox", v1("/"), v1("/kubepods/burstable/" + pod), false},
		// Ids that share a prefix are told apart; a part of an id is no id.
		{"a prefix of the id", v2("/"), v2("/kubepods/" + pod + "/" + idA[:12]), false},
		{"the id inside a longer name", v2("/"), v2("/kubepods/" + pod + "/x" + idA), false},
		{"the id with more after it", v2("/"), v2("/kubepods/" + pod + "/" + idA + "0"), false},
		{"an unknown prefix", v2("/"), v2("/kubepods/" + pod + "/evil-" + idA + ".scope"), false},
		{"a host process", v1("/"), v1("/system.slice/containerd.service"), false},
		{"a host process in the root cgroup", v1("/system.slice/kubelet.service"), v2("/"), false},
		{"empty (process gone)", v2("/"), "", false},
		{"garbage", v2("/"), "not a cgroup file", false},
		// jmx-attach inside the target container (Exec): its own cgroup names the id, or it is the root of a
		// private cgroup namespace, and a process in the same cgroup belongs.
		{"exec, private namespace v2", v2("/"), v2("/"), true},
		{"exec, private namespace v2, a sub-cgroup", v2("/"), v2("/sub"), false},
		{"exec in the container v1", v1("/kubepods/burstable/" + pod + "/" + idA), v1("/kubepods/burstable/" + pod + "/" + idA), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newContainer("containerd://"+idA, []byte(tc.self))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.matchCgroup([]byte(tc.cgroup)); got != tc.want {
				t.Errorf("matchCgroup(%q) = %v, want %v", tc.cgroup, got, tc.want)
			}
		})
	}
}

// TestContainerOfAPrivateNamespaceRootIsItsOwnCgroup: run inside the container under a private cgroup namespace
// (the Exec strategy on cgroup v2), jmx-attach's own cgroup is "/" and says nothing of the id; processes in the
// same cgroup belong, and one in a sub-cgroup or outside does not.
func TestContainerOfAPrivateNamespaceRootIsItsOwnCgroup(t *testing.T) {
	c, err := newContainer("cri-o://"+idA, []byte(v2("/")))
	if err != nil {
		t.Fatal(err)
	}
	if c.self == nil {
		t.Fatal("the namespace root was not taken as this container")
	}
	for cg, want := range map[string]bool{v2("/"): true, v2("/sub"): false, v2("/../crio-" + idB + ".scope"): false} {
		if got := c.matchCgroup([]byte(cg)); got != want {
			t.Errorf("matchCgroup(%q) = %v, want %v", cg, got, want)
		}
	}
	// On the node (not at a namespace root, not in the container) only the id counts.
	c, err = newContainer("containerd://"+idA, []byte(v1("/system.slice/kubelet.service")))
	if err != nil {
		t.Fatal(err)
	}
	if c.self != nil || c.matchCgroup([]byte(v1("/system.slice/kubelet.service"))) {
		t.Error("a process in jmx-attach's own cgroup outside the container was taken as the container's")
	}
}

func TestParseContainerID(t *testing.T) {
	for _, ok := range []string{"containerd://" + idA, "cri-o://" + idA, "docker://" + idA, idA, "containerd://" + strings.ToUpper(idA)} {
		if _, id, err := ParseContainerID(ok); err != nil || id != idA {
			t.Errorf("ParseContainerID(%q) = %q, %v", ok, id, err)
		}
	}
	for _, bad := range []string{"", "containerd://", "containerd://" + idA[:12], "containerd://" + idA + "0", "containerd://" + idA[:63] + "g", "containerd://../" + idA[3:]} {
		if _, _, err := ParseContainerID(bad); err == nil {
			t.Errorf("ParseContainerID(%q) accepted", bad)
		}
	}
}

// testCgroup creates a cgroup v1 directory of this machine's pids hierarchy (or v2's unified one) named
// <test>/<id>, and removes it (after moving its processes back to this process's cgroup) when the test ends.
func testCgroup(t *testing.T, id string) (dir string, enter func(pid int)) {
	t.Helper()
	base := "/sys/fs/cgroup/pids"
	if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
		base = "/sys/fs/cgroup"
	}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	home := "/"
	for _, l := range parseCgroupFile(data) {
		if l.controllers == "pids" || (base == "/sys/fs/cgroup" && l.hierarchy == "0") {
			home = l.path
		}
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	parent := filepath.Join(base, home, "hktest-container-"+hex.EncodeToString(b[:]))
	dir = filepath.Join(parent, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup (%v): needs root and a pids or v2 hierarchy", err)
	}
	t.Cleanup(func() {
		for _, d := range []string{dir, parent} {
			if procs, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil {
				for _, p := range strings.Fields(string(procs)) {
					_ = os.WriteFile(filepath.Join(base, home, "cgroup.procs"), []byte(p), 0o644)
				}
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for _, d := range []string{dir, parent} {
			for {
				err := os.Remove(d)
				if err == nil || os.IsNotExist(err) {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("remove cgroup %s: %v", d, err)
					break
				}
				time.Sleep(50 * time.Millisecond) // the kernel frees a cgroup once its last task has exited
			}
		}
	})
	return dir, func(pid int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatalf("move pid %d into %s: %v", pid, dir, err)
		}
	}
}

// TestDiscoverInSeesOnlyTheContainersJVMs puts real JVMs into real cgroups named like containerd's (cgroupfs)
// containers, one each, and a sleeping process into a third: DiscoverIn lists only the JVM of the container
// named, an Injector limited to it refuses the other JVM untouched, and a container none of whose processes
// exists is container-not-found, not the rest of /proc.
func TestDiscoverInSeesOnlyTheContainersJVMs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	needJava(t)
	_, enterA := testCgroup(t, idA)
	_, enterB := testCgroup(t, idB)
	idC := strings.Repeat("c", 64)
	_, enterC := testCgroup(t, idC)
	inA := jvmtest.StartJVM(t, jvmtest.Options{App: testApp})
	inB := jvmtest.StartJVM(t, jvmtest.Options{App: testApp})
	enterA(inA.Pid)
	enterB(inB.Pid)
	sleeper := exec.Command("sleep", "3600")
	exited, err := startChild(sleeper)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); <-exited })
	enterC(sleeper.Process.Pid)

	a, err := NewContainer("containerd://" + idA)
	if err != nil {
		t.Fatal(err)
	}
	jvms, err := DiscoverIn(a)
	if err != nil {
		t.Fatal(err)
	}
	if len(jvms) != 1 || jvms[0].PID != inA.Pid {
		t.Fatalf("container A: %+v, want only pid %d", jvms, inA.Pid)
	}
	if all, _ := Discover(); len(all) < 2 {
		t.Fatalf("without a container: %d JVMs, want both", len(all))
	}
	// The JVM of container B through an Injector of container A: refused before anything is read of it.
	in := newTestInjector(t, WithContainer(a))
	res := in.Inject(context.Background(), inB.Pid, loopbackAgent(freePort(t)))
	if res.Reason != ReasonContainerNotFound || res.NSPID != 0 {
		t.Errorf("pid %d of another container: %+v", inB.Pid, res)
	}
	if rr := in.Reconfigure(context.Background(), inB.Pid, []byte(validConfig)); rr.Reason != ReasonContainerNotFound {
		t.Errorf("reconfigure of another container's JVM: %+v", rr)
	}
	// Container C has a process but no JVM: none, and no error.
	c, _ := NewContainer("containerd://" + idC)
	if jvms, err := DiscoverIn(c); err != nil || len(jvms) != 0 {
		t.Errorf("container C: %+v, %v", jvms, err)
	}
	// A container of which no process exists: container-not-found, never the rest of /proc.
	none, _ := NewContainer("containerd://" + strings.Repeat("d", 64))
	if jvms, err := DiscoverIn(none); ReasonOf(err) != ReasonContainerNotFound || len(jvms) != 0 {
		t.Errorf("no such container: %+v, %v", jvms, err)
	}
	if _, _, err := WaitForJVMsIn(context.Background(), none, time.Minute, nil); ReasonOf(err) != ReasonContainerNotFound {
		t.Errorf("WaitForJVMsIn of no such container: %v", err)
	}
}
