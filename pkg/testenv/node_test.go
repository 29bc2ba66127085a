package testenv_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// startNode starts a cluster-mode environment, skipping only when the
// machine cannot run one and CI is unset.
func startNode(tb testing.TB, opts ...testenv.Option) *testenv.Environment {
	tb.Helper()
	env, err := testenv.Start(context.Background(), append([]testenv.Option{testenv.WithNode()}, opts...)...)
	if err != nil {
		testenv.SkipOrFail(tb, err)
	}
	return env
}

// hostState is what a cluster-mode environment may leave behind on the host.
type hostState struct {
	procs   map[string]bool // "pid cmdline" of processes tied to a node
	mounts  map[string]bool // mount points
	netns   map[string]bool // entries of /run/netns
	links   map[string]bool // network interfaces, "name@ifindex" (another environment may reuse a name)
	cgroups map[string]bool // cgroup directories, two levels deep
	sockets map[string]bool // containerd shim sockets in /run/containerd/s
}

// hasLink reports whether the state has a network interface named name.
func hasLink(s hostState, name string) bool {
	for l := range s.links {
		if n, _, _ := strings.Cut(l, "@"); n == name {
			return true
		}
	}
	return false
}

// snapshot reads the host state. Processes count when their command line
// names dir (containerd, kubelet, the shims' socket) or they run in a
// container cgroup (/k8s.io/...), so unrelated processes of other tests on
// the machine do not disturb the comparison.
func snapshot(t *testing.T, dir string) hostState {
	t.Helper()
	s := hostState{procs: map[string]bool{}, mounts: map[string]bool{}, netns: map[string]bool{},
		links: map[string]bool{}, cgroups: map[string]bool{}, sockets: map[string]bool{}}
	socks, _ := os.ReadDir("/run/containerd/s")
	for _, e := range socks {
		s.sockets[e.Name()] = true
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := fmt.Sscanf(e.Name(), "%d", new(int)); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		cgroup, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		cmd := string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		if strings.Contains(cmd, dir) || strings.Contains(string(cgroup), "/k8s.io/") {
			s.procs[e.Name()+" "+cmd] = true
		}
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	var cgroupRoots []string
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		s.mounts[fields[4]] = true
		if strings.Contains(sc.Text(), " - cgroup") {
			cgroupRoots = append(cgroupRoots, fields[4])
		}
	}
	f.Close()
	ns, _ := os.ReadDir("/run/netns")
	for _, e := range ns {
		s.netns[e.Name()] = true
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, e := range links {
		index, _ := os.ReadFile(filepath.Join("/sys/class/net", e.Name(), "ifindex"))
		s.links[e.Name()+"@"+strings.TrimSpace(string(index))] = true
	}
	for _, root := range cgroupRoots {
		level1, _ := os.ReadDir(root)
		for _, a := range level1 {
			if !a.IsDir() {
				continue
			}
			s.cgroups[filepath.Join(root, a.Name())] = true
			level2, _ := os.ReadDir(filepath.Join(root, a.Name()))
			for _, b := range level2 {
				if b.IsDir() {
					s.cgroups[filepath.Join(root, a.Name(), b.Name())] = true
				}
			}
		}
	}
	return s
}

// added returns the keys of after that are not in before, sorted.
func added(before, after map[string]bool) []string {
	var out []string
	for k := range after {
		if !before[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// still returns the keys of items that are in now, sorted.
func still(items []string, now map[string]bool) []string {
	var out []string
	for _, k := range items {
		if now[k] {
			out = append(out, k)
		}
	}
	return out
}

func TestStopLeavesNoProcessMountNetnsLinkOrCgroup(t *testing.T) {
	archive, err := testimages.BuildEcho(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, os.TempDir()+"/handlerkit-testenv-")
	start := time.Now()
	env := startNode(t, testenv.WithImageArchives(archive.File))
	t.Logf("cluster started in %s", time.Since(start).Round(time.Millisecond))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			env.Stop()
		}
	})
	dir := env.Dir()
	// A running pod gives the node something to clean: a sandbox and a
	// container (shims, mounts, cgroups), a netns with a veth on the bridge,
	// and an image volume (containerd mounts it under its state directory).
	ns, err := env.CreateNamespace(t.Context(), "leftovers")
	if err != nil {
		t.Fatal(err)
	}
	pods := env.Clientset().CoreV1().Pods(ns)
	_, err = pods.Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers: []corev1.Container{{Name: "echo", Image: testimages.EchoRef, ImagePullPolicy: corev1.PullNever,
				VolumeMounts: []corev1.VolumeMount{{Name: "image", MountPath: "/image", ReadOnly: true}}}},
			Volumes: []corev1.Volume{{Name: "image", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{
				Reference: testimages.EchoRef, PullPolicy: corev1.PullNever}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, "echo", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod not running: %v", err)
	}
	during := snapshot(t, dir)
	procs := added(before.procs, during.procs)
	mounts := added(before.mounts, during.mounts)
	links := added(before.links, during.links)
	cgroups := added(before.cgroups, during.cgroups)
	netns := added(before.netns, during.netns)
	sockets := added(before.sockets, during.sockets)
	// The check must be able to fail: each kind of leftover exists now.
	veth := regexp.MustCompile(`^veth`)
	hasVeth := false
	for _, l := range links {
		hasVeth = hasVeth || veth.MatchString(l)
	}
	hasImageVolume := false
	for _, m := range mounts {
		hasImageVolume = hasImageVolume || (strings.HasPrefix(m, dir) && strings.Contains(m, "/image-volumes/"))
	}
	if len(procs) < 5 || len(mounts) == 0 || !hasVeth || len(cgroups) == 0 || !hasImageVolume {
		t.Fatalf("a running node should add processes, mounts (an image volume's among them), a veth and cgroups; got\nprocs %q\nmounts %q\nlinks %q\ncgroups %q",
			procs, mounts, links, cgroups)
	}
	start = time.Now()
	if err := env.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	stopped = true
	t.Logf("cluster stopped in %s", time.Since(start).Round(time.Millisecond))
	// A netns (and with it the veth) is freed by the kernel asynchronously
	// once its last user is gone: wait for the links to go (a timeout is
	// reported below as links left behind).
	var after hostState
	_ = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		after = snapshot(t, dir)
		return len(still(links, after.links)) == 0, nil
	})
	for kind, left := range map[string][]string{
		"processes": still(procs, after.procs),
		"mounts":    still(mounts, after.mounts),
		"netns":     still(netns, after.netns),
		"links":     still(links, after.links),
		"cgroups":   still(cgroups, after.cgroups),
		"sockets":   still(sockets, after.sockets),
	} {
		if len(left) > 0 {
			t.Errorf("%s left behind after Stop: %q", kind, left)
		}
	}
	for m := range after.mounts {
		if strings.HasPrefix(m, dir) {
			t.Errorf("mount %s under the environment directory left behind", m)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("environment directory %s still exists (stat: %v)", dir, err)
	}
}

func TestLoadImageArchiveNeedsClusterMode(t *testing.T) {
	env := sharedEnv(t)
	if err := env.LoadImageArchive(t.Context(), "/nonexistent.tar"); err == nil ||
		!strings.Contains(err.Error(), "WithNode") {
		t.Fatalf("want an error naming WithNode, got %v", err)
	}
	if env.PodCIDR() != "" {
		t.Fatalf("control-plane mode has no pod CIDR, got %q", env.PodCIDR())
	}
}

// BenchmarkClusterStart measures a warm cluster-mode start: binaries and
// the pause image cached, until the node is Ready and the default
// ServiceAccount exists. Stop is not timed.
func BenchmarkClusterStart(b *testing.B) {
	for b.Loop() {
		env := startNode(b)
		b.StopTimer()
		if err := env.Stop(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

const nodeChildEnvVar = "HANDLERKIT_TESTENV_NODE_CHILD"

// runNodeChild is the body of a re-executed test binary: it starts a
// cluster-mode environment with the service proxy and a running pod,
// reports its apiserver and directory and waits to be killed (see
// TestKilledNodeIsCleanedUpAndServiceProxyEnvironmentsTakeTurns).
func runNodeChild() {
	ctx := context.Background()
	fail := func(err error) {
		fmt.Println("error", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "node-child-")
	if err != nil {
		fail(err)
	}
	archive, err := testimages.BuildEcho(ctx, dir)
	if err != nil {
		fail(err)
	}
	env, err := testenv.Start(ctx, testenv.WithServiceProxy(), testenv.WithImageArchives(archive.File))
	if err != nil {
		if errors.Is(err, testenv.ErrNodeUnsupported) {
			fmt.Println("unsupported", err)
			os.Exit(0)
		}
		fail(fmt.Errorf("%s", strings.ReplaceAll(err.Error(), "\n", " | ")))
	}
	os.RemoveAll(dir)
	ns, err := env.CreateNamespace(ctx, "killed")
	if err != nil {
		fail(err)
	}
	pods := env.Clientset().CoreV1().Pods(ns)
	_, err = pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "echo"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "echo", Image: testimages.EchoRef, ImagePullPolicy: corev1.PullNever}}}},
		metav1.CreateOptions{})
	if err != nil {
		fail(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, "echo", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		fail(err)
	}
	fmt.Println("host", env.Config().Host)
	fmt.Println("dir", env.Dir())
	select {}
}
