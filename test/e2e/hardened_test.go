package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
)

// The proofs of issue 22 for the JVMs a careful user runs: the standard
// hardened pod (a read-only root with an emptyDir on /tmp), a /tmp that is a
// symbolic link, and Temurin 25. The images these need beyond the shared
// ones are built and imported by the tests that use them, once per run.

// imageLoads remembers, per image reference, the outcome of building and
// importing an on-demand image.
var (
	imageLoadsMu sync.Mutex
	imageLoads   = map[string]error{}
)

// needImage builds (or finds in the image cache) the image ref with build and
// imports it into the node's containerd, once per test binary.
func needImage(t *testing.T, ref string, build func(ctx context.Context, dir, cacheDir string, app testimages.JavaApp) (testimages.Archive, error)) {
	t.Helper()
	imageLoadsMu.Lock()
	defer imageLoadsMu.Unlock()
	err, done := imageLoads[ref]
	if !done {
		start := time.Now()
		err = func() error {
			cache, err := testimages.DefaultCacheDir()
			if err != nil {
				return err
			}
			a, err := build(t.Context(), cache, cache, sampleApp)
			if err != nil {
				return err
			}
			return env.LoadImageArchive(t.Context(), a.File)
		}()
		imageLoads[ref] = err
		t.Logf("image %s built and imported in %s", ref, time.Since(start).Round(time.Millisecond))
	}
	if err != nil {
		t.Fatalf("image %s: %v", ref, err)
	}
}

// hardened makes the pod the standard hardened pod: non-root (uid and gid
// 1000), every capability dropped, no privilege escalation, the
// RuntimeDefault seccomp profile, a read-only root filesystem and an emptyDir
// volume on /tmp; with fsGroup when it is set.
func hardened(fsGroup *int64) jvmPodOption {
	return func(p *corev1.Pod) {
		asUser(1000, 1000)(p)
		p.Spec.SecurityContext.FSGroup = fsGroup
		c := &p.Spec.Containers[0]
		c.SecurityContext.ReadOnlyRootFilesystem = ptr.To(true)
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "tmp",
			VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"})
	}
}

// withStrategy sets the exporter's injection strategy and port.
func withStrategy(s jmxv1alpha1.InjectionStrategy, port int32) func(*jmxv1alpha1.PrometheusJmxExporter) {
	return func(ex *jmxv1alpha1.PrometheusJmxExporter) {
		ex.Spec.Injection.Strategy = s
		ex.Spec.Port = port
	}
}

// shell runs a command line with the container's /bin/sh and returns its
// trimmed stdout, failing the test when it fails.
func shell(t *testing.T, ns, pod, script string) string {
	t.Helper()
	out, stderr, err := execIn(t, ns, pod, "app", []string{"/bin/sh", "-c", script})
	if err != nil {
		t.Fatalf("%s: %q: %v %s", pod, script, err, stderr)
	}
	return strings.TrimSpace(out)
}

// checkServingOnce checks that the pod's JVM lives (no restart), that it
// logged exactly one agent line, a serving one, and that the pod has the
// given number of ephemeral containers.
func checkServingOnce(t *testing.T, ns, name string, ephemeral int) {
	t.Helper()
	pod := alive(t, ns, name)
	if n, lines := agentLoads(t, ns, name, "app"); n != 1 || !strings.Contains(lines[0], "serving on :") {
		t.Errorf("%s: agent lines %q, want exactly one, serving", name, lines)
	}
	if n := len(pod.Spec.EphemeralContainers); n != ephemeral {
		t.Errorf("%s: %d ephemeral containers, want %d", name, n, ephemeral)
	}
}

// TestHardenedPodIsInjectedWithEitherStrategy: the standard hardened pod
// (non-root, no capabilities, RuntimeDefault seccomp, readOnlyRootFilesystem
// and an emptyDir on /tmp, whose mode the kubelet makes 0777 without the
// sticky bit) is injected with the EphemeralContainer strategy and with the
// Exec strategy (that pod also with an fsGroup, which makes the volume
// group-owned and setgid): the agent serves /metrics, the exporter's status
// reports the endpoint, the JVM logged one agent line and lives, and the
// copies are in the pod's own /tmp volume.
func TestHardenedPodIsInjectedWithEitherStrategy(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-hardened", nil)
	deployOperator(t, ns, withExec())
	cases := []struct {
		pod      string
		strategy jmxv1alpha1.InjectionStrategy
		port     int32
		fsGroup  *int64
		// ephemeral containers the injection leaves
		ephemeral int
	}{
		{"hardened-ec", jmxv1alpha1.InjectionEphemeralContainer, jmxv1alpha1.DefaultPort, nil, 1},
		{"hardened-exec", jmxv1alpha1.InjectionExec, 9500, ptr.To(int64(2000)), 0},
	}
	for _, c := range cases {
		createPod(t, ns, jvmPod(c.pod, map[string]string{"app": c.pod}, testimages.JVMAppRef, hardened(c.fsGroup)))
	}
	for _, c := range cases {
		waitRunning(t, ns, c.pod)
		// The case the copy rule refused: /tmp world-writable, not
		// sticky, on a read-only root.
		mode, err := strconv.ParseUint(shell(t, ns, c.pod, "stat -c %a /tmp"), 8, 32)
		if err != nil || mode&0o002 == 0 || mode&0o1000 != 0 {
			t.Fatalf("%s: /tmp has mode %o (%v), want world-writable and not sticky", c.pod, mode, err)
		}
		if out, _, err := execIn(t, ns, c.pod, "app", []string{"/bin/sh", "-c", "touch /app/x"}); err == nil {
			t.Fatalf("%s: the root filesystem is writable (%s)", c.pod, out)
		}
		createExporter(t, ns, exporter(c.pod, map[string]string{"app": c.pod}, withStrategy(c.strategy, c.port)))
	}
	for _, c := range cases {
		checkInjected(t, ns, c.pod, c.pod, c.port)
		waitCondition(t, ns, c.pod, jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected, time.Minute)
		checkServingOnce(t, ns, c.pod, c.ephemeral)
		if out := shell(t, ns, c.pod, "ls -d /tmp/handlerkit-jmx-* 2>/dev/null || true"); out == "" {
			t.Errorf("%s: no copies' directory in the emptyDir /tmp", c.pod)
		}
	}
}

// TestTmpLinkJVMIsInjected: JVMs whose /tmp is a symbolic link to /var/tmp
// (mode 1777) inside their container (the image TmpLinkJVMRef) are injected
// through the operator, as root with the EphemeralContainer strategy and as
// uid 1000 with the Exec strategy: the agent serves, one agent line each, the
// JVMs live, and the copies are in /var/tmp.
func TestTmpLinkJVMIsInjected(t *testing.T) {
	t.Parallel()
	needImage(t, testimages.TmpLinkJVMRef, testimages.BuildTmpLinkJVM)
	ns := newNamespace(t, "e2e-tmplink", nil)
	deployOperator(t, ns, withExec())
	cases := []struct {
		pod       string
		strategy  jmxv1alpha1.InjectionStrategy
		port      int32
		opts      []jvmPodOption
		ephemeral int
	}{
		{"link-ec", jmxv1alpha1.InjectionEphemeralContainer, jmxv1alpha1.DefaultPort, nil, 1},
		{"link-exec", jmxv1alpha1.InjectionExec, 9500, []jvmPodOption{asUser(1000, 1000)}, 0},
	}
	for _, c := range cases {
		createPod(t, ns, jvmPod(c.pod, map[string]string{"app": c.pod}, testimages.TmpLinkJVMRef, c.opts...))
	}
	for _, c := range cases {
		waitRunning(t, ns, c.pod)
		if got := shell(t, ns, c.pod, "readlink /tmp; stat -c %a /var/tmp"); got != "/var/tmp\n1777" {
			t.Fatalf("%s: /tmp links to and /var/tmp has mode %q, want /var/tmp and 1777", c.pod, got)
		}
		createExporter(t, ns, exporter(c.pod, map[string]string{"app": c.pod}, withStrategy(c.strategy, c.port)))
	}
	for _, c := range cases {
		checkInjected(t, ns, c.pod, c.pod, c.port)
		checkServingOnce(t, ns, c.pod, c.ephemeral)
		if out := shell(t, ns, c.pod, "ls -d /var/tmp/handlerkit-jmx-* 2>/dev/null || true"); out == "" {
			t.Errorf("%s: no copies' directory in /var/tmp", c.pod)
		}
	}
}

// TestTemurin25ConfigsTheCollectorRejects runs the four configs that
// ended JVMs (TestConfigsTheCollectorRejectsTouchOneJVM) through the operator
// against a Temurin 25 JVM (the image Temurin25JVMRef), then a good one: each
// bad config is refused by the agent with the collector's message in
// ConfigValid=False, the JVM lives, and after the fix the agent serves it.
func TestTemurin25ConfigsTheCollectorRejects(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(testimages.Temurin25Home + "/bin/java"); err != nil {
		t.Skipf("no Temurin 25 JDK at %s to build the image from (install one there to run this test): %v", testimages.Temurin25Home, err)
	}
	needImage(t, testimages.Temurin25JVMRef, testimages.BuildTemurin25JVM)
	ns := newNamespace(t, "e2e-temurin", nil)
	deployOperator(t, ns, withArgs("--resync=2s", "--breaker-window=10s"))
	ctx := t.Context()
	labels := map[string]string{"app": "temurin"}
	createPod(t, ns, jvmPod("t25", labels, testimages.Temurin25JVMRef))
	waitRunning(t, ns, "t25")
	if exe := shell(t, ns, "t25", "readlink /proc/1/exe"); exe != testimages.Temurin25Home+"/bin/java" {
		t.Fatalf("the pod's JVM is %q, want Temurin 25's", exe)
	}
	configs := []string{
		"rules:\n- pattern: \"java.lang<type=(Memory>\"\n",
		"rules:\n- pattern: \"java.lang<type=(?P<t>\\\\w+)>\"\n",
		"includeObjectNames: [\"java.lang\"]\n",
		"httpServer:\n  authentication:\n    basic:\n      username: admin\n",
	}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap("cfg", configs[0]), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createExporter(t, ns, exporter("temurin", labels, withConfig("cfg")))
	for i, config := range configs {
		if i > 0 {
			if _, err := kube.CoreV1().ConfigMaps(ns).Update(ctx, configMap("cfg", config), metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		var ex *jmxv1alpha1.PrometheusJmxExporter
		waitFor(t, 3*time.Minute, fmt.Sprintf("config %d refused by the agent", i), func() (bool, string) {
			ex = getExporter(t, ns, "temurin")
			rc := ex.Status.RejectedConfig
			return rc != nil && rc.ConfigSHA256 == sha256Hex(config), fmt.Sprintf("%+v %+v", rc, ex.Status.Conditions)
		})
		rc := ex.Status.RejectedConfig
		c := findCond(ex.Status.Conditions, jmxv1alpha1.ConditionConfigValid)
		if c.Status != metav1.ConditionFalse || c.Reason != jmxv1alpha1.ReasonConfigInvalid || rc.Message == "" || !strings.Contains(c.Message, rc.Message) {
			t.Errorf("config %d: ConfigValid %s %s %q, want False ConfigInvalid with the agent's message %q", i, c.Status, c.Reason, c.Message, rc.Message)
		}
		t.Logf("config %d %q: %s", i, config, rc.Message)
		n, lines := agentLoads(t, ns, "t25", "app")
		if n != i+1 || !strings.Contains(lines[n-1], "refused: config-invalid") {
			t.Errorf("config %d: agent lines %q, want %d, the last a config-invalid refusal", i, lines, i+1)
		}
		alive(t, ns, "t25")
	}
	good := "rules:\n- pattern: \".*\"\n"
	if _, err := kube.CoreV1().ConfigMaps(ns).Update(ctx, configMap("cfg", good), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkInjected(t, ns, "temurin", "t25", jmxv1alpha1.DefaultPort)
	waitCondition(t, ns, "temurin", jmxv1alpha1.ConditionConfigValid, metav1.ConditionTrue, jmxv1alpha1.ReasonConfigLoaded, time.Minute)
	pod := alive(t, ns, "t25")
	n, lines := agentLoads(t, ns, "t25", "app")
	if n != len(configs)+1 || !strings.Contains(lines[n-1], "serving on :") {
		t.Errorf("agent lines %q, want %d, the last serving", lines, len(configs)+1)
	}
	if rc := getExporter(t, ns, "temurin").Status.RejectedConfig; rc != nil && rc.ConfigSHA256 == sha256Hex(good) {
		t.Errorf("the good config was rejected: %+v", rc)
	}
	t.Logf("Temurin 25 pod %s: %d ephemeral containers", pod.Name, len(pod.Spec.EphemeralContainers))
}
