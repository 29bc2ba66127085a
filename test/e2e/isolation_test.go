package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// copiesIn lists the copies' directories in a container's /tmp (it needs a shell in the image).
func copiesIn(t *testing.T, ns, pod, container string) []string {
	t.Helper()
	out, stderr, err := execIn(t, ns, pod, container, []string{"/bin/sh", "-c", "ls -d /tmp/" + jvm.AgentDirPrefix + "* 2>/dev/null || true"})
	if err != nil {
		t.Fatalf("%s/%s: list /tmp: %v %s", pod, container, err, stderr)
	}
	return strings.Fields(out)
}

// settledOnOneEndpoint waits until the exporter is Ready with exactly one endpoint, in container, and checks
// that no status write was refused on the way ("Duplicate value").
func settledOnOneEndpoint(t *testing.T, ns, name, pod, container string) {
	t.Helper()
	waitCondition(t, ns, name, jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected, 2*time.Minute)
	ex := getExporter(t, ns, name)
	if n := len(ex.Status.MetricsEndpoints); n != 1 || ex.Status.MetricsEndpoints[0].Container != container || ex.Status.MetricsEndpoints[0].Pod != pod {
		t.Errorf("endpoints %+v, want one, of %s/%s", ex.Status.MetricsEndpoints, pod, container)
	}
	for _, kind := range []string{"PrometheusJmxExporter", "Pod"} {
		obj := name
		if kind == "Pod" {
			obj = pod
		}
		for _, e := range events(t, ns, kind, obj) {
			if strings.Contains(e.Message, "Duplicate value") {
				t.Errorf("event %s %s: %s", e.Type, e.Reason, e.Message)
			}
		}
	}
}

// TestSharedProcessNamespaceInjectsOnlyTheSelectedContainer: in a pod with shareProcessNamespace, whose two
// containers each run a JVM and see each other's processes, an exporter that selects one container
// (spec.containers) loads the agent into that container's JVM only. The other JVM logged no agent line and has
// no copies in its /tmp, the port is served by the selected JVM, and the status settles on one endpoint with no
// refused write.
func TestSharedProcessNamespaceInjectsOnlyTheSelectedContainer(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-sharedpid", nil)
	deployOperator(t, ns)
	labels := map[string]string{"app": "shared"}
	p := jvmPod("shared", labels, testimages.JVMAppRef)
	p.Spec.ShareProcessNamespace = ptr.To(true)
	other := p.Spec.Containers[0]
	other.Name = "other"
	p.Spec.Containers = append(p.Spec.Containers, other)
	createPod(t, ns, p)
	waitRunning(t, ns, "shared")
	// Each container sees both JVMs: the case the isolation is for.
	if out := shell(t, ns, "shared", "ls -l /proc/[0-9]*/exe 2>/dev/null | grep -c '/bin/java$'"); out != "2" {
		t.Fatalf("the app container sees %s JVMs, want both", out)
	}
	createExporter(t, ns, exporter("shared", labels, func(ex *jmxv1alpha1.PrometheusJmxExporter) {
		ex.Spec.Containers = []string{"app"}
	}))
	ep := checkInjected(t, ns, "shared", "shared", jmxv1alpha1.DefaultPort)
	if ep.Container != "app" {
		t.Errorf("endpoint in container %q, want app", ep.Container)
	}
	settledOnOneEndpoint(t, ns, "shared", "shared", "app")
	if n, lines := agentLoads(t, ns, "shared", "app"); n != 1 {
		t.Errorf("app: agent lines %q, want one", lines)
	}
	if n, lines := agentLoads(t, ns, "shared", "other"); n != 0 {
		t.Errorf("other: agent lines %q, want none", lines)
	}
	if c := copiesIn(t, ns, "shared", "other"); len(c) != 0 {
		t.Errorf("other: copies %v in its /tmp", c)
	}
	if c := copiesIn(t, ns, "shared", "app"); len(c) != 1 {
		t.Errorf("app: copies %v, want one directory", c)
	}
	// The other JVM has no marker, and was not signalled (no attach socket).
	out, _, _ := execIn(t, ns, "shared", "other", []string{"/bin/sh", "-c", "ls -a /tmp"})
	if strings.Contains(out, ".handlerkit-jmx-agent-") || strings.Contains(out, ".java_pid") {
		t.Errorf("other's /tmp shows an injection or an attach: %s", out)
	}
	pod := alive(t, ns, "shared")
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Errorf("%s restarted", cs.Name)
		}
	}
}

// TestHostPIDPodInjectsOnlyItsOwnJVM: a hostPID pod (in a privileged namespace) sees every process of the node,
// including a JVM the test starts on the host: only the pod's own JVM is injected, and the host JVM is left
// untouched (no marker, no attach socket, no agent line, still running).
func TestHostPIDPodInjectsOnlyItsOwnJVM(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-hostpid", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})
	deployOperator(t, ns)
	host := jvmtest.StartJVM(t, jvmtest.Options{App: jvmtest.App{Jar: sampleApp.Jar, MainClass: sampleApp.MainClass}})
	labels := map[string]string{"app": "hostpid"}
	p := jvmPod("hostpid", labels, testimages.JVMAppRef)
	p.Spec.HostPID = true
	createPod(t, ns, p)
	waitRunning(t, ns, "hostpid")
	if out := shell(t, ns, "hostpid", "test -d /proc/"+strconv.Itoa(host.Pid)+" && echo visible"); out != "visible" {
		t.Fatalf("the host JVM (pid %d) is not visible in the hostPID pod: %q", host.Pid, out)
	}
	createExporter(t, ns, exporter("hostpid", labels))
	checkInjected(t, ns, "hostpid", "hostpid", jmxv1alpha1.DefaultPort)
	settledOnOneEndpoint(t, ns, "hostpid", "hostpid", "app")
	pid := strconv.Itoa(host.Pid)
	for _, f := range []string{"/tmp/.handlerkit-jmx-agent-" + pid + ".json", "/tmp/.java_pid" + pid, "/tmp/.attach_pid" + pid} {
		if _, err := os.Lstat(f); err == nil {
			t.Errorf("the host JVM was touched: %s exists", f)
		}
	}
	if !host.Alive() || strings.Contains(host.Output(), jvmtest.AgentLinePrefix) {
		t.Errorf("the host JVM (alive=%v) was injected: %s", host.Alive(), host.Output())
	}
	alive(t, ns, "hostpid")
}

// TestRestartedContainerLosesTheCopiesOfItsDeadJVM: a container with an emptyDir /tmp (the hardened pod) is
// injected, then its JVM ends and the kubelet restarts the container; the volume survives with the dead JVM's
// copies. After the injection of the new JVM, those copies are gone and only the new JVM's are there.
func TestRestartedContainerLosesTheCopiesOfItsDeadJVM(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-deadcopies", nil)
	deployOperator(t, ns)
	labels := map[string]string{"app": "restarts"}
	createPod(t, ns, jvmPod("restarts", labels, testimages.JVMAppRef, hardened(nil)))
	first := waitRunning(t, ns, "restarts").Status.ContainerStatuses[0].ContainerID
	createExporter(t, ns, exporter("restarts", labels))
	checkInjected(t, ns, "restarts", "restarts", jmxv1alpha1.DefaultPort)
	old := copiesIn(t, ns, "restarts", "app")
	if len(old) != 1 {
		t.Fatalf("copies after the first injection: %v, want one directory", old)
	}
	// The JVM is the container's pid 1 and ends on SIGTERM; the kubelet starts the container again.
	_, _, _ = execIn(t, ns, "restarts", "app", []string{"/bin/sh", "-c", "kill -TERM 1"})
	var second string
	waitFor(t, 3*time.Minute, "the container restarted and running", func() (bool, string) {
		p, err := kube.CoreV1().Pods(ns).Get(t.Context(), "restarts", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cs := p.Status.ContainerStatuses[0]
		second = cs.ContainerID
		return cs.RestartCount >= 1 && cs.State.Running != nil && second != first, cs.ContainerID
	})
	// The pod's record says when the new start has the agent: the status is
	// not rewritten for a restart that changes none of its counts
	// (docs/api.md, "Size, and when the status is written").
	waitFor(t, 3*time.Minute, "the new container injected", func() (bool, string) {
		rec, _ := injectedRecord(t, ns, "restarts")
		c := rec.Containers["app"]
		return c.ContainerID == second && len(c.JVMs) == 1, fmt.Sprintf("%+v", c)
	})
	now := copiesIn(t, ns, "restarts", "app")
	if len(now) != 1 || now[0] == old[0] {
		t.Errorf("copies after the new JVM's injection: %v; the dead JVM's were %v", now, old)
	}
}

// TestBaselineNamespaceRootJVMGetsNoAddedCapability: in a namespace that enforces the baseline Pod Security
// level, a root JVM with the runtime's default capabilities is injected by an ephemeral container that runs as
// root with exactly those capabilities: nothing added, nothing dropped, no SYS_PTRACE, which baseline admits.
func TestBaselineNamespaceRootJVMGetsNoAddedCapability(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-baseline", map[string]string{"pod-security.kubernetes.io/enforce": "baseline"})
	deployOperator(t, ns)
	labels := map[string]string{"app": "rootjvm"}
	createPod(t, ns, jvmPod("rootjvm", labels, testimages.JVMAppRef))
	waitRunning(t, ns, "rootjvm")
	createExporter(t, ns, exporter("rootjvm", labels))
	checkInjected(t, ns, "rootjvm", "rootjvm", jmxv1alpha1.DefaultPort)
	_, pod := injectedRecord(t, ns, "rootjvm")
	if len(pod.Spec.EphemeralContainers) != 1 {
		t.Fatalf("%d ephemeral containers, want 1", len(pod.Spec.EphemeralContainers))
	}
	sc := pod.Spec.EphemeralContainers[0].SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 ||
		len(sc.Capabilities.Drop) != 0 || sc.Privileged != nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("security context %+v (capabilities %+v), want root with the target's default set: nothing added or dropped", sc, sc.Capabilities)
	}
	for _, c := range sc.Capabilities.Add {
		if c == corev1.Capability("SYS_PTRACE") {
			t.Error("SYS_PTRACE added")
		}
	}
	checkServingOnce(t, ns, "rootjvm", 1)
}
