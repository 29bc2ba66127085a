package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// reloadMetric counts the agent's config reloads.
const reloadMetric = "jmx_config_reload_success_total"

func configMap(name, config string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"config.yaml": config}}
}

func withConfig(cm string) func(*jmxv1alpha1.PrometheusJmxExporter) {
	return func(ex *jmxv1alpha1.PrometheusJmxExporter) {
		ex.Spec.Config = &jmxv1alpha1.ExporterConfig{ConfigMapName: cm}
	}
}

// TestRestartConfigPortAndDeletion follows one exporter through a JVM pod's
// life: injection, a container restart (re-injection), a config change (the
// running agent reloads it), a port change (reported, applied at the next
// start) and deletion (annotations cleared).
func TestRestartConfigPortAndDeletion(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-life", nil)
	deployOperator(t, ns)
	ctx := t.Context()
	labels := map[string]string{"app": "life"}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap("jmx", "lowercaseOutputName: true\nrules:\n- pattern: \".*\"\n"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, ns, jvmPod("jvm", labels, testimages.JVMAppRef))
	waitRunning(t, ns, "jvm")
	createExporter(t, ns, exporter("life", labels, withConfig("jmx")))
	ep := checkInjected(t, ns, "life", "jvm", jmxv1alpha1.DefaultPort)

	// A config change reaches the running agent: it reloads the file, and
	// its output changes (lowercaseOutputName: false keeps the MBean's
	// capitals).
	if body, _ := scrape(ep.PodIP, ep.Port); strings.Contains(body, "java_lang_Memory_") {
		t.Fatalf("lowercaseOutputName: true, yet the agent serves java_lang_Memory_*")
	}
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "jmx", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["config.yaml"] = "lowercaseOutputName: false\nrules:\n- pattern: \".*\"\n"
	if _, err := kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the agent serves the new config", func() (bool, string) {
		body, err := scrape(ep.PodIP, ep.Port)
		if err != nil {
			return false, err.Error()
		}
		v, _ := metricValue(body, reloadMetric)
		return strings.Contains(body, "java_lang_Memory_"), fmt.Sprintf("no java_lang_Memory_* (%s = %v)", reloadMetric, v)
	})
	waitCondition(t, ns, "life", jmxv1alpha1.ConditionConfigApplied, metav1.ConditionTrue, jmxv1alpha1.ReasonConfigInUse, time.Minute)
	waitFor(t, 30*time.Second, "a Reconfigured event", func() (bool, string) {
		return hasEvent(events(t, ns, "Pod", "jvm"), "Reconfigured"), "none"
	})

	// A port change cannot move a running agent: status says which pods
	// still serve the old port.
	ex := getExporter(t, ns, "life")
	ex.Spec.Port = 9600
	if _, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Update(ctx, ex, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ex = waitCondition(t, ns, "life", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonPortChangePending, time.Minute)
	if len(ex.Status.PortPendingPods) != 1 || ex.Status.PortPendingPods[0] != "jvm" {
		t.Errorf("portPendingPods %v, want [jvm]", ex.Status.PortPendingPods)
	}
	if _, err := scrape(ep.PodIP, jmxv1alpha1.DefaultPort); err != nil {
		t.Errorf("the old port stopped serving: %v", err)
	}

	// A container restart (new container ID) loses the agent with the old
	// process; the new start is injected, on the new port.
	restartContainer(t, ns, "jvm")
	waitFor(t, 3*time.Minute, "re-injection on port 9600", func() (bool, string) {
		ex := getExporter(t, ns, "life")
		for _, e := range ex.Status.MetricsEndpoints {
			if e.Pod == "jvm" && e.Port == 9600 && e.ContainerID != ep.ContainerID {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", ex.Status.MetricsEndpoints)
	})
	_, pod := injectedRecord(t, ns, "jvm")
	waitScrape(t, pod.Status.PodIP, 9600, heapMetric)
	waitCondition(t, ns, "life", jmxv1alpha1.ConditionDegraded, metav1.ConditionFalse, jmxv1alpha1.ReasonAsExpected, time.Minute)

	// Deletion: the finalizer clears the operator's annotations, and an
	// Event says that the loaded agent stays.
	if err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Delete(ctx, "life", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "annotations cleared", func() (bool, string) {
		_, pod := injectedRecord(t, ns, "jvm")
		for _, k := range []string{operator.AnnotationAgents, operator.AnnotationScrape, operator.AnnotationPort, operator.AnnotationPorts} {
			if _, ok := pod.Annotations[k]; ok {
				return false, k + " still set"
			}
		}
		return true, ""
	})
	waitFor(t, time.Minute, "the exporter is gone", func() (bool, string) {
		_, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Get(ctx, "life", metav1.GetOptions{})
		return err != nil, "still there"
	})
	if !hasEvent(events(t, ns, "PrometheusJmxExporter", "life"), "Finalized") {
		t.Error("no Finalized event")
	}
}

// restartContainer kills the JVM of the pod's first container (through an
// ephemeral container would leave a trace; exec is simplest) and waits for the
// container's next start.
func restartContainer(t *testing.T, ns, name string) {
	t.Helper()
	pod, err := kube.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := pod.Status.ContainerStatuses[0].ContainerID
	// The JVM image has a shell: kill PID 1 of the container.
	if _, _, err := execIn(t, ns, name, pod.Spec.Containers[0].Name, []string{"/bin/sh", "-c", "kill 1"}); err != nil {
		t.Logf("exec kill: %v (the container may have died before exec returned)", err)
	}
	waitFor(t, 2*time.Minute, "container restart", func() (bool, string) {
		p, err := kube.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cs := p.Status.ContainerStatuses[0]
		return cs.ContainerID != old && cs.State.Running != nil, cs.ContainerID
	})
}

// TestBadInputIsStoppedBeforeAnyAttach gives each kind of bad input its own
// exporter and checks its condition and Event, and that the JVM is alive and
// untouched.
func TestBadInputIsStoppedBeforeAnyAttach(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-bad", nil)
	deployOperator(t, ns)
	ctx := t.Context()
	for _, cm := range []*corev1.ConfigMap{
		configMap("invalid-yaml", "rules: [\n"),
		configMap("unknown-key", "rule:\n- pattern: \".*\"\n"),
		configMap("other-key", "x"),
	} {
		if cm.Name == "other-key" {
			cm.Data = map[string]string{"other.yaml": "rules: []\n"}
		}
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name, app, cm string
		typ, reason   string
		status        metav1.ConditionStatus
	}{
		{"missing-cm", "a", "nope", jmxv1alpha1.ConditionConfigValid, jmxv1alpha1.ReasonConfigMapNotFound, metav1.ConditionFalse},
		{"missing-key", "b", "other-key", jmxv1alpha1.ConditionConfigValid, jmxv1alpha1.ReasonConfigKeyNotFound, metav1.ConditionFalse},
		{"bad-yaml", "c", "invalid-yaml", jmxv1alpha1.ConditionConfigValid, jmxv1alpha1.ReasonConfigInvalid, metav1.ConditionFalse},
		{"bad-key", "d", "unknown-key", jmxv1alpha1.ConditionConfigValid, jmxv1alpha1.ReasonConfigInvalid, metav1.ConditionFalse},
		{"no-match", "nobody", "", jmxv1alpha1.ConditionReady, jmxv1alpha1.ReasonNoPodsMatched, metav1.ConditionFalse},
	}
	for _, c := range cases {
		if c.app != "nobody" {
			createPod(t, ns, jvmPod("jvm-"+c.app, map[string]string{"app": c.app}, testimages.JVMAppRef))
		}
	}
	for _, c := range cases {
		c := c
		var mut []func(*jmxv1alpha1.PrometheusJmxExporter)
		if c.cm != "" {
			mut = append(mut, withConfig(c.cm))
		}
		createExporter(t, ns, exporter(c.name, map[string]string{"app": c.app}, mut...))
	}
	for _, c := range cases {
		ex := waitCondition(t, ns, c.name, c.typ, c.status, c.reason, 2*time.Minute)
		if len(ex.Status.MetricsEndpoints) != 0 {
			t.Errorf("%s: endpoints %+v", c.name, ex.Status.MetricsEndpoints)
		}
		waitFor(t, 30*time.Second, c.name+" warning event", func() (bool, string) {
			return hasEvent(events(t, ns, "PrometheusJmxExporter", c.name), c.reason), "none"
		})
	}
	// Nothing touched the JVMs: no ephemeral container, no record, no restart.
	for _, c := range cases {
		if c.app == "nobody" {
			continue
		}
		pod := waitRunning(t, ns, "jvm-"+c.app)
		if len(pod.Spec.EphemeralContainers) != 0 || pod.Annotations[operator.AnnotationAgents] != "" || pod.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("%s: pod was touched: %d ephemeral containers, annotations %v, restarts %d", c.name,
				len(pod.Spec.EphemeralContainers), pod.Annotations, pod.Status.ContainerStatuses[0].RestartCount)
		}
	}

	// Fixing the config lets injection go ahead.
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "unknown-key", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["config.yaml"] = "rules:\n- pattern: \".*\"\n"
	if _, err := kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkInjected(t, ns, "bad-key", "jvm-d", jmxv1alpha1.DefaultPort)
}

// TestConflictingExportersOlderWins: two exporters select one pod; the older
// injects it, the newer gets a condition naming the conflict.
func TestConflictingExportersOlderWins(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-conflict", nil)
	deployOperator(t, ns)
	createPod(t, ns, jvmPod("jvm", map[string]string{"app": "shared", "tier": "web"}, testimages.JVMAppRef))
	waitRunning(t, ns, "jvm")
	createExporter(t, ns, exporter("first", map[string]string{"app": "shared"}))
	checkInjected(t, ns, "first", "jvm", jmxv1alpha1.DefaultPort)
	createExporter(t, ns, exporter("second", map[string]string{"tier": "web"}, func(ex *jmxv1alpha1.PrometheusJmxExporter) {
		ex.Spec.Port = 9700
	}))
	ex := waitCondition(t, ns, "second", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonSelectorConflict, time.Minute)
	c := findCond(ex.Status.Conditions, jmxv1alpha1.ConditionDegraded)
	if !strings.Contains(c.Message, "first") || !strings.Contains(c.Message, "jvm") {
		t.Errorf("conflict message %q does not name the other exporter and the pod", c.Message)
	}
	rec, _ := injectedRecord(t, ns, "jvm")
	if rec.Exporter != "first" || len(ex.Status.MetricsEndpoints) != 0 {
		t.Errorf("record exporter %q, second's endpoints %+v", rec.Exporter, ex.Status.MetricsEndpoints)
	}
}

func findCond(cs []metav1.Condition, typ string) metav1.Condition {
	for _, c := range cs {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// TestTwoJVMContainersAndASidecar: each JVM container gets the agent, two
// JVMs in one container each get their own port, and the non-JVM container is
// left alone.
func TestTwoJVMContainersAndASidecar(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-multi", nil)
	deployOperator(t, ns, withArgs("--jvm-wait=20s"))
	p := jvmPod("multi", map[string]string{"app": "multi"}, testimages.JVMAppRef)
	// The worker container runs two JVMs.
	second := p.Spec.Containers[0]
	second.Name = "worker"
	java := testimages.JavaHome + "/bin/java -cp " + testimages.AppDir + "/" + jvmtest.SampleJarName + " " + jvmtest.SampleMainClass
	second.Command = []string{"/bin/sh", "-c", java + " & exec " + java}
	sidecar := corev1.Container{Name: "sidecar", Image: testimages.EchoRef, ImagePullPolicy: corev1.PullNever}
	p.Spec.Containers = append(p.Spec.Containers, second, sidecar)
	createPod(t, ns, p)
	waitRunning(t, ns, "multi")
	createExporter(t, ns, exporter("multi", map[string]string{"app": "multi"}))
	var eps []jmxv1alpha1.MetricsEndpoint
	waitFor(t, 3*time.Minute, "three endpoints and the sidecar recorded", func() (bool, string) {
		ex := getExporter(t, ns, "multi")
		eps = ex.Status.MetricsEndpoints
		rec, _ := injectedRecord(t, ns, "multi")
		return len(eps) == 3 && rec.Containers["sidecar"].NoJVM, fmt.Sprintf("endpoints %+v record %+v", eps, rec)
	})
	ports := map[int32]bool{}
	containers := map[string]int{}
	for _, ep := range eps {
		ports[ep.Port] = true
		containers[ep.Container]++
		waitScrape(t, ep.PodIP, ep.Port, heapMetric)
	}
	if len(ports) != 3 || containers["app"] != 1 || containers["worker"] != 2 {
		t.Errorf("endpoints %+v: want three ports, one JVM in app and two in worker", eps)
	}
	_, pod := injectedRecord(t, ns, "multi")
	if got := strings.Count(pod.Annotations[operator.AnnotationPorts], ",") + 1; got != 3 {
		t.Errorf("ports annotation %q", pod.Annotations[operator.AnnotationPorts])
	}
	waitCondition(t, ns, "multi", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected, time.Minute)
}

// TestPermanentFailuresAreNamedAndNeverRetried: a JVM with the attach
// mechanism disabled is refused before any signal, named, and left alive.
func TestPermanentFailuresAreNamedAndNeverRetried(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-refused", nil)
	deployOperator(t, ns)
	createPod(t, ns, jvmPod("noattach", map[string]string{"app": "refused"}, testimages.JVMAppRef,
		javaOptions("-Xmx48m -XX:+DisableAttachMechanism")))
	waitRunning(t, ns, "noattach")
	createExporter(t, ns, exporter("refused", map[string]string{"app": "refused"}))
	ex := waitCondition(t, ns, "refused", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonInjectionFailed, 3*time.Minute)
	if c := findCond(ex.Status.Conditions, jmxv1alpha1.ConditionDegraded); !strings.Contains(c.Message, jmxv1alpha1.ReasonAttachDisabled) {
		t.Errorf("message %q does not name %s", c.Message, jmxv1alpha1.ReasonAttachDisabled)
	}
	if ex.Status.FailedPods != 1 {
		t.Errorf("failedPods %d", ex.Status.FailedPods)
	}
	waitFor(t, 30*time.Second, "an AttachDisabled event on the pod", func() (bool, string) {
		return hasEvent(events(t, ns, "Pod", "noattach"), jmxv1alpha1.ReasonAttachDisabled), "none"
	})
	// Never retried: a deliberate pause of 10 s, which proves that no
	// second attempt comes and the JVM lives on, checked every second.
	holds(t, 10*time.Second, "exactly one attempt on a living JVM", func() (bool, string) {
		pod := waitRunning(t, ns, "noattach")
		n, restarts := len(pod.Spec.EphemeralContainers), pod.Status.ContainerStatuses[0].RestartCount
		return n == 1 && restarts == 0, fmt.Sprintf("%d ephemeral containers (want exactly 1 attempt), %d restarts", n, restarts)
	})
}

// TestRestrictedNamespace: under Pod Security "restricted", the ephemeral
// container runs as the JVM's own user with every capability dropped.
func TestRestrictedNamespace(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-restricted", map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"})
	deployOperator(t, ns)
	createPod(t, ns, jvmPod("jvm", map[string]string{"app": "strict"}, testimages.JVMAppRef, asUser(1001, 1001)))
	waitRunning(t, ns, "jvm")
	createExporter(t, ns, exporter("strict", map[string]string{"app": "strict"}))
	checkInjected(t, ns, "strict", "jvm", jmxv1alpha1.DefaultPort)
	_, pod := injectedRecord(t, ns, "jvm")
	sc := pod.Spec.EphemeralContainers[0].SecurityContext
	if sc.RunAsUser == nil || *sc.RunAsUser != 1001 || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || len(sc.Capabilities.Add) != 0 {
		t.Errorf("ephemeral container security context %+v", sc)
	}
}

// TestOperatorKilledMidInjectionInjectsExactlyOnce kills the operator while
// its injections run; its successor finishes them, and every JVM has the
// agent loaded exactly once.
func TestOperatorKilledMidInjectionInjectsExactlyOnce(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-kill", nil)
	deployOperator(t, ns)
	ctx := t.Context()
	labels := map[string]string{"app": "kill"}
	const pods = 4
	for i := 0; i < pods; i++ {
		createPod(t, ns, jvmPod(fmt.Sprintf("jvm-%d", i), labels, testimages.JVMAppRef))
	}
	for i := 0; i < pods; i++ {
		waitRunning(t, ns, fmt.Sprintf("jvm-%d", i))
	}
	createExporter(t, ns, exporter("kill", labels))
	// Kill the operator as soon as the first ephemeral container appears.
	waitFor(t, 2*time.Minute, "the first injection starts", func() (bool, string) {
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=kill"})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range list.Items {
			if len(p.Spec.EphemeralContainers) > 0 {
				return true, ""
			}
		}
		return false, "none yet"
	})
	ops, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + operatorName})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ops.Items {
		if err := kube.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	waitCondition(t, ns, "kill", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected, 4*time.Minute)
	for i := 0; i < pods; i++ {
		name := fmt.Sprintf("jvm-%d", i)
		rec, pod := injectedRecord(t, ns, name)
		c := rec.Containers["app"]
		if len(c.JVMs) != 1 {
			t.Errorf("%s: record %+v", name, c)
			continue
		}
		// Exactly one load: the agent prints one line per agentmain call
		// on every JDK (TestAgentLoadCountSeesASecondLoad shows the count
		// sees a second load).
		if n, lines := agentLoads(t, ns, name, "app"); n != 1 {
			t.Errorf("%s: the agent was loaded %d times: %q", name, n, lines)
		}
		if pod.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("%s restarted", name)
		}
	}
}

func containerLogs(t *testing.T, ns, pod, container string) string {
	t.Helper()
	b, err := kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).Do(t.Context()).Raw()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestFiftyPods: one exporter selects fifty JVM pods, and all get the agent.
// It is the one test that does not call t.Parallel: Go runs it, alone on the
// node, before it releases the parallel tests, because fifty JVMs starting
// at once saturate the node, and the other tests' deadlines are not sized
// for that.
func TestFiftyPods(t *testing.T) {
	if testing.Short() {
		t.Skip("fifty JVMs: not in -short")
	}
	ns := newNamespace(t, "e2e-fifty", nil)
	deployOperator(t, ns)
	labels := map[string]string{"app": "fifty"}
	createExporter(t, ns, exporter("fifty", labels))
	const n = 50
	for i := 0; i < n; i++ {
		createPod(t, ns, jvmPod(fmt.Sprintf("jvm-%02d", i), labels, testimages.JVMAppRef))
	}
	start := time.Now()
	waitFor(t, 12*time.Minute, "fifty pods injected", func() (bool, string) {
		ex := getExporter(t, ns, "fifty")
		return ex.Status.InjectedPods == n && len(ex.Status.MetricsEndpoints) == n,
			fmt.Sprintf("matched %d injected %d failed %d", ex.Status.MatchedPods, ex.Status.InjectedPods, ex.Status.FailedPods)
	})
	t.Logf("fifty pods created and injected in %s", time.Since(start).Round(time.Second))
	ex := getExporter(t, ns, "fifty")
	for _, ep := range ex.Status.MetricsEndpoints[:5] {
		waitScrape(t, ep.PodIP, ep.Port, heapMetric)
	}
}

// TestNamespaceList: an operator told to watch a comma list of namespaces
// (its Role bound in each) serves exactly those.
func TestNamespaceList(t *testing.T) {
	t.Parallel()
	home := newNamespace(t, "e2e-home", nil)
	a := newNamespace(t, "e2e-nsa", nil)
	b := newNamespace(t, "e2e-nsb", nil)
	other := newNamespace(t, "e2e-other", nil)
	ctx := t.Context()
	// The served namespace's Roles of deploy/operator (all but the home
	// namespace's), bound in each served namespace to the operator's
	// ServiceAccount in its home namespace, as docs/install.md says.
	for _, ns := range []string{a, b} {
		for _, obj := range slices.Concat(decodeManifests(t, rbacFiles[0]), decodeManifests(t, rbacFiles[1]), decodeManifests(t, rbacFiles[2])) {
			if m, ok := obj.(metav1.Object); ok && strings.HasSuffix(m.GetName(), "-home") {
				continue
			}
			var err error
			switch o := obj.(type) {
			case *rbacv1.Role:
				_, err = kube.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
			case *rbacv1.RoleBinding:
				o.Subjects[0].Namespace = home
				_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	deployOperator(t, home, withArgs("--namespaces="+a+","+b))
	labels := map[string]string{"app": "listed"}
	for _, ns := range []string{a, b, other} {
		createPod(t, ns, jvmPod("jvm", labels, testimages.JVMAppRef))
		createExporter(t, ns, exporter("listed", labels))
	}
	for _, ns := range []string{a, b} {
		waitRunning(t, ns, "jvm")
		checkInjected(t, ns, "listed", "jvm", jmxv1alpha1.DefaultPort)
	}
	// The namespace outside the list is never touched.
	ex := getExporter(t, other, "listed")
	pod := waitRunning(t, other, "jvm")
	if len(ex.Status.Conditions) != 0 || len(ex.Finalizers) != 0 || len(pod.Spec.EphemeralContainers) != 0 {
		t.Errorf("the unwatched namespace was touched: exporter %+v, %d ephemeral containers", ex.Status, len(pod.Spec.EphemeralContainers))
	}
}
