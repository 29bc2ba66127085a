// Package e2e tests the PrometheusJmxExporter operator end to end: the
// operator runs in a real cluster (pkg/testenv with a real node: kubelet,
// containerd, runc) as the Deployment of deploy/operator, under its own
// ServiceAccount and RBAC, and loads the project's JMX exporter java agent
// (on jmx_exporter's collector) into real JVMs in real containers. Nothing is
// mocked.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

var (
	env      *testenv.Environment
	kube     kubernetes.Interface
	jmx      versioned.Interface
	repoRoot string
	// sampleApp is the sample application in the JVM images, for images
	// that tests build on demand (hardened_test.go).
	sampleApp testimages.JavaApp
	// agentArchive is the agent image's archive, for tests that load it
	// under a second name (trust_test.go).
	agentArchive string
)

// operatorName is the name of the operator's Deployment, ServiceAccount and
// Role in deploy/operator.
const operatorName = "prometheus-jmx-exporter-operator"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoRoot = filepath.Join(wd, "..", "..")
	work, err := os.MkdirTemp("", "handlerkit-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(work)
	// The tests are independent (each in namespaces of its own, with an
	// operator of its own) and mostly wait on the cluster, so they run in
	// parallel well beyond GOMAXPROCS on this machine's one node; an explicit
	// -parallel wins.
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		if err := flag.Set("test.parallel", strconv.Itoa(defaultParallel)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	// What needs no cluster is made while the cluster starts (or while
	// Start waits for the node lock): the images, the monitoring CRDs and
	// test/monitoring's commands. Each goroutine ends before run returns:
	// an early return cancels ctx and waits, so no build is left behind.
	start := time.Now()
	var images struct {
		archives []string
		err      error
		took     time.Duration
	}
	var crds struct {
		crds []*apiextensionsv1.CustomResourceDefinition
		err  error
	}
	var prep sync.WaitGroup
	prep.Add(3)
	go func() {
		defer prep.Done()
		images.archives, images.err = buildImages(ctx, work)
		images.took = time.Since(start)
	}()
	go func() {
		defer prep.Done()
		crds.crds, crds.err = monitoringCRDs(ctx)
	}()
	go func() {
		defer prep.Done()
		buildMonitoringTools(ctx)
	}()
	defer removeMonitoringTools()
	defer removeHelmRelease()
	defer prep.Wait()
	defer cancel()
	env, err = testenv.Start(ctx, envOptions()...)
	if err != nil {
		if errors.Is(err, testenv.ErrNodeUnsupported) && os.Getenv("CI") == "" {
			fmt.Fprintf(os.Stderr, "e2e: skipping (CI unset): %v\n", err)
			return 0
		}
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	defer func() {
		if env != nil {
			env.Stop()
		}
	}()
	fmt.Fprintf(os.Stderr, "e2e: cluster started in %s\n", time.Since(start).Round(time.Millisecond))
	prep.Wait()
	if images.err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building images: %v\n", images.err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: images built in %s (beside the cluster's start)\n", images.took.Round(time.Millisecond))
	imported := time.Now()
	for _, a := range images.archives {
		if err := env.LoadImageArchive(ctx, a); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			return 1
		}
	}
	fmt.Fprintf(os.Stderr, "e2e: images imported in %s\n", time.Since(imported).Round(time.Millisecond))
	kube = env.Clientset()
	if jmx, err = versioned.NewForConfig(env.Config()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := env.InstallCRDsFromDir(ctx, filepath.Join(repoRoot, "deploy", "crds")); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: install CRDs: %v\n", err)
		return 1
	}
	// The Prometheus Operator's PodMonitor and ServiceMonitor kinds are
	// served from the start, as in a cluster that runs it: every operator
	// the tests deploy keeps a PodMonitor per exporter and a ServiceMonitor
	// for its metrics Service.
	err = crds.err
	if err == nil {
		err = env.InstallCRDs(ctx, crds.crds...)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: install the PodMonitor and ServiceMonitor CRDs: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: ready for the tests %s after the start\n", time.Since(start).Round(time.Millisecond))
	code := m.Run()
	err = env.Stop()
	env = nil
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: stop: %v\n", err)
		code = 1
	}
	return code
}

// subtest is one of the subtests runTogether runs.
type subtest struct {
	name string
	run  func(t *testing.T)
}

// runTogether runs subtests all at once, each in a goroutine of its own, and
// returns when all have ended. They share t's place among the -parallel
// tests: a subtest that called t.Parallel would instead queue for a place of
// its own once t's function returned, behind every top-level test that had
// not started yet, and the longest subtests (the corpus) would start last.
// t.Run may be called from several goroutines at once; each subtest still
// fails, logs and cleans up on its own.
func runTogether(t *testing.T, subtests ...subtest) {
	t.Helper()
	var wg sync.WaitGroup
	for _, s := range subtests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(s.name, s.run)
		}()
	}
	wg.Wait()
}

// defaultParallel is how many tests run at once unless -parallel says
// otherwise: enough that the tests' waits overlap, few enough that the
// pods of the tests running beside TestFiftyPods stay well under the node's
// 110 and the operators' CPU requests under its two cores.
const defaultParallel = 8

// buildImages builds the agent image from this checkout (the operator,
// jmx-attach and the project's agent, jvmtest.AgentJar) and the JVM images.
func buildImages(ctx context.Context, work string) ([]string, error) {
	cache, err := testimages.DefaultCacheDir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	// The project's agent, as the production image ships it.
	jar, err := jvmtest.AgentJar(ctx)
	if err != nil {
		return nil, err
	}
	agentDir := filepath.Join(work, "agent-image")
	if err := os.MkdirAll(agentDir, 0o755); err != nil {
		return nil, err
	}
	agent, err := testimages.BuildAgent(ctx, agentDir, jar,
		append(testimages.DefaultAgentBinaries(), testimages.OperatorBinary()))
	if err != nil {
		return nil, err
	}
	agentArchive = agent.File
	app, err := jvmtest.BuildSampleApp(filepath.Join(work, "app"))
	if err != nil {
		return nil, err
	}
	javaApp := testimages.JavaApp{Jar: app.Jar, MainClass: app.MainClass}
	sampleApp = javaApp
	jvmImage, err := testimages.BuildJVMApp(ctx, cache, cache, javaApp)
	if err != nil {
		return nil, err
	}
	slim, err := testimages.BuildShelllessJVM(ctx, cache, cache, javaApp)
	if err != nil {
		return nil, err
	}
	echo, err := testimages.BuildEcho(ctx, cache)
	if err != nil {
		return nil, err
	}
	return []string{agent.File, jvmImage.File, slim.File, echo.File}, nil
}

// newNamespace creates a namespace for one test, with labels (for example a
// Pod Security level), and deletes it at the end.
func newNamespace(t *testing.T, prefix string, labels map[string]string) string {
	t.Helper()
	ns, err := env.CreateNamespace(t.Context(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(labels) > 0 {
		got, err := kube.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Labels == nil {
			got.Labels = map[string]string{}
		}
		for k, v := range labels {
			got.Labels[k] = v
		}
		if _, err := kube.CoreV1().Namespaces().Update(t.Context(), got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	return ns
}

// decodeManifests reads the YAML documents of a file in deploy/.
func decodeManifests(t testing.TB, rel string) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	var out []runtime.Object
	r := yaml.NewYAMLReader(bufioReader(data))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		out = append(out, obj)
	}
	return out
}

// operatorSetup changes the operator's Deployment before it is created.
type operatorSetup func(d *appsv1.Deployment)

// withArgs adds command-line flags to the operator.
func withArgs(args ...string) operatorSetup {
	return func(d *appsv1.Deployment) {
		c := &d.Spec.Template.Spec.Containers[0]
		c.Args = append(c.Args, args...)
	}
}

// withExec enables the Exec strategy next to EphemeralContainer: the
// operator's default is EphemeralContainer alone, and Exec is opt-in.
func withExec() operatorSetup {
	return withArgs("--strategies=EphemeralContainer,Exec")
}

// withReplicas sets the operator's replicas.
func withReplicas(n int32) operatorSetup {
	return func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(n) }
}

// rbacFiles are the operator's RBAC manifests: the served namespace's and
// home namespace's Roles, each strategy's (Exec's from its opt-in,
// deploy/overlays/exec, because tests that pass withExec use it), and the
// ClusterRole that reads the namespaces' opt-out label (its objects renamed
// after the test's namespace, as the webhook's are: see installWebhook).
var rbacFiles = []string{"deploy/operator/rbac.yaml",
	"deploy/operator/rbac-ephemeralcontainer.yaml", "deploy/overlays/exec/rbac-exec.yaml", "deploy/operator/rbac-namespaces.yaml"}

// deployOperator applies deploy/operator's RBAC files and operator.yaml in
// ns, as a cluster admin would, and waits until a replica is ready. The
// operator then watches ns with its own ServiceAccount.
func deployOperator(t testing.TB, ns string, setups ...operatorSetup) *appsv1.Deployment {
	t.Helper()
	ctx := t.Context()
	var dep *appsv1.Deployment
	for _, rel := range append(slices.Clone(rbacFiles), "deploy/operator/operator.yaml") {
		for _, obj := range decodeManifests(t, rel) {
			var err error
			switch o := obj.(type) {
			case *corev1.ServiceAccount:
				_, err = kube.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
			case *rbacv1.Role:
				_, err = kube.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
			case *rbacv1.RoleBinding:
				for i := range o.Subjects {
					o.Subjects[i].Namespace = ns
				}
				_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
			case *rbacv1.ClusterRole:
				o.Name += "-" + ns
				_, err = kube.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
				name := o.Name
				t.Cleanup(func() { _ = kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
			case *rbacv1.ClusterRoleBinding:
				o.Name += "-" + ns
				o.RoleRef.Name += "-" + ns
				for i := range o.Subjects {
					o.Subjects[i].Namespace = ns
				}
				_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
				name := o.Name
				t.Cleanup(func() {
					_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
				})
			case *appsv1.Deployment:
				o.Spec.Replicas = ptr.To(int32(1))
				// Short lease timings: tests kill leaders on purpose.
				// A breaker window of 10 s rather than 1 m: every
				// exporter that selects more than one container injects
				// the first, waits the window, then the others (docs/
				// operator.md, "One container first"), and no test but
				// the breaker's (which sets the default again) is about
				// the window's length; the order is the same, shorter.
				// A test's own flag comes later and wins.
				withArgs("--log-level=debug", "--injection-timeout=90s", "--breaker-window=10s")(o)
				for _, s := range setups {
					s(o)
				}
				dep, err = kube.AppsV1().Deployments(ns).Create(ctx, o, metav1.CreateOptions{})
			default:
				t.Fatalf("%s: unexpected %T", rel, obj)
			}
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("%s: %v", rel, err)
			}
		}
	}
	t.Cleanup(func() { dumpOperatorLogs(t, ns) })
	waitFor(t, 3*time.Minute, "the operator is ready", func() (bool, string) {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, operatorName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.ReadyReplicas >= 1, fmt.Sprintf("ready %d", d.Status.ReadyReplicas)
	})
	return dep
}

// dumpOperatorLogs prints the operator's logs when the test failed.
func dumpOperatorLogs(t testing.TB, ns string) {
	if !t.Failed() {
		return
	}
	ctx := context.Background()
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + operatorName})
	if err != nil {
		return
	}
	all, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, p := range all.Items {
			for _, st := range p.Status.EphemeralContainerStatuses {
				if st.State.Terminated != nil {
					t.Logf("pod %s ephemeral container %s exited %d: %s", p.Name, st.Name, st.State.Terminated.ExitCode, st.State.Terminated.Message)
				} else {
					t.Logf("pod %s ephemeral container %s: %+v", p.Name, st.Name, st.State)
				}
			}
		}
	}
	for _, p := range pods.Items {
		b, err := kube.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr.To(int64(150))}).Do(ctx).Raw()
		if err == nil {
			t.Logf("logs of %s:\n%s", p.Name, b)
		}
	}
}

// jvmPodOption changes a JVM pod.
type jvmPodOption func(*corev1.Pod)

// jvmPod is a pod running the sample application in image.
func jvmPod(name string, labels map[string]string, image string, opts ...jvmPodOption) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []corev1.Container{{
				Name: "app", Image: image, ImagePullPolicy: corev1.PullNever,
				Env: []corev1.EnvVar{{Name: "JAVA_TOOL_OPTIONS", Value: "-Xmx48m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}},
			}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// asUser runs the pod's containers as uid:gid, non-root.
func asUser(uid, gid int64) jvmPodOption {
	return func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To(uid), RunAsGroup: ptr.To(gid),
			RunAsNonRoot: ptr.To(uid != 0), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].SecurityContext = &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			}
		}
	}
}

// javaOptions sets JAVA_TOOL_OPTIONS of the first container.
func javaOptions(opts string) jvmPodOption {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "JAVA_TOOL_OPTIONS", Value: opts}}
	}
}

func createPod(t *testing.T, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := kube.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitRunning waits until every container of the pod runs and returns it.
func waitRunning(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	waitFor(t, 3*time.Minute, "pod "+name+" running", func() (bool, string) {
		p, err := kube.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return false, string(p.Status.Phase)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running == nil {
				return false, cs.Name + " not running"
			}
		}
		return true, ""
	})
	return pod
}

func exporter(name string, labels map[string]string, mutate ...func(*jmxv1alpha1.PrometheusJmxExporter)) *jmxv1alpha1.PrometheusJmxExporter {
	ex := &jmxv1alpha1.PrometheusJmxExporter{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       jmxv1alpha1.PrometheusJmxExporterSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	for _, m := range mutate {
		m(ex)
	}
	return ex
}

func createExporter(t *testing.T, ns string, ex *jmxv1alpha1.PrometheusJmxExporter) {
	t.Helper()
	if _, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Create(t.Context(), ex, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func getExporter(t *testing.T, ns, name string) *jmxv1alpha1.PrometheusJmxExporter {
	t.Helper()
	ex, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// waitCondition waits until the exporter's condition typ has status and
// reason, and returns the exporter.
func waitCondition(t *testing.T, ns, name, typ string, status metav1.ConditionStatus, reason string, timeout time.Duration) *jmxv1alpha1.PrometheusJmxExporter {
	t.Helper()
	var ex *jmxv1alpha1.PrometheusJmxExporter
	waitFor(t, timeout, fmt.Sprintf("%s %s=%s/%s", name, typ, status, reason), func() (bool, string) {
		got, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ex = got
		for _, c := range got.Status.Conditions {
			if c.Type == typ {
				return c.Status == status && c.Reason == reason, fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message)
			}
		}
		return false, "no condition " + typ
	})
	return ex
}

// waitFor polls cond until it holds, failing the test after timeout with the
// last state cond described. A wait that took long is logged, so that a slow
// run shows where its time went.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	var last string
	for {
		ok, state := cond()
		if ok {
			if took := time.Since(start); took > 20*time.Second {
				t.Logf("waited %s for %s", took.Round(time.Millisecond), what)
			}
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("cancelled waiting for %s; last: %s", what, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// holds is a deliberate pause, not a wait: it proves that nothing happens for
// d (for example that an operator resyncing every 2 s never tries again), by
// checking cond every second of it and failing as soon as cond stops holding.
func holds(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		if ok, state := cond(); !ok {
			t.Fatalf("%s stopped holding: %s", what, state)
		}
		if !time.Now().Before(end) {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("cancelled while checking that %s holds", what)
		case <-time.After(time.Second):
		}
	}
}

// scrape GETs /metrics from ip:port (the pod network is reachable from the
// node, where the test runs).
func scrape(ip string, port int32) (string, error) {
	// A JVM on a busy node can take seconds to answer: the callers poll.
	c := &http.Client{Timeout: 15 * time.Second}
	resp, err := c.Get("http://" + net.JoinHostPort(ip, strconv.Itoa(int(port))) + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	return string(b), err
}

// metricValue returns the value of the first sample of name (with any
// labels) in a Prometheus text exposition.
func metricValue(body, name string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			return v, true
		}
	}
	return 0, false
}

// events lists the Events about an object.
func events(t *testing.T, ns, kind, name string) []corev1.Event {
	t.Helper()
	list, err := kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func hasEvent(evs []corev1.Event, reason string) bool {
	for _, e := range evs {
		if e.Reason == reason {
			return true
		}
	}
	return false
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// execIn runs command in a container and returns its stdout and stderr.
func execIn(t *testing.T, ns, pod, container string, command []string) (string, string, error) {
	t.Helper()
	req := kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdout: true, Stderr: true},
			scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(env.Config(), "GET", req.URL().String())
	if err != nil {
		return "", "", err
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return stdout.String(), stderr.String(), err
}
