package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// The proofs of issue 27 on the real node: the operator's admission webhook,
// deployed from deploy/operator with its Service, gives the agent to pods at
// their creation (spec.injection.mode AtStart and Both), beside live attach.
// Each operator is the namespaced install (deployOperator) plus the webhook's
// manifests, with the namespace set where kustomize sets it
// (deploy/operator/kustomizeconfig.yaml): the Service the configuration
// calls, and the one namespace its namespaceSelector takes, the operator's
// own, which it serves. One change keeps the parallel tests apart on one
// cluster, where a MutatingWebhookConfiguration is cluster-scoped: each
// operator's configuration has a name of its own (--webhook-configuration,
// and the ClusterRole that lets it patch the caBundle names that one).
// test/deploy proves the manifests as shipped.

// webhookFiles are the webhook's manifests: its RBAC (the Role for its
// Secret, the ClusterRole for its configuration's caBundle, the Role for its
// dry runs of patched pods), its Service and
// MutatingWebhookConfiguration, and the Role for restartOnRefusal's
// evictions, as deploy/operator's kustomization installs them.
var webhookFiles = []string{"deploy/operator/rbac-webhook.yaml", "deploy/operator/rbac-atstart.yaml", "deploy/operator/webhook.yaml", "deploy/operator/rbac-eviction.yaml"}

// Names of the shipped webhook objects (the contract of issue 27).
const (
	webhookServiceName = "prometheus-jmx-exporter-operator-webhook"
	webhookConfigName  = "prometheus-jmx-exporter-operator"
)

// atStartOperator is an operator deployed with its admission webhook.
type atStartOperator struct {
	ns     string // the operator's namespace, which it serves
	config string // its MutatingWebhookConfiguration
}

// deployAtStartOperator creates a namespace, installs the webhook's objects
// (see webhookFiles) and deploys the operator there with --webhook=on, and
// waits until it is ready and the configuration carries its CA bundle.
func deployAtStartOperator(tb testing.TB, prefix string, setups ...operatorSetup) atStartOperator {
	tb.Helper()
	return deployAtStartOperatorWith(tb, prefix, nil, setups...)
}

// deployAtStartOperatorWith is deployAtStartOperator with more webhooks in
// the operator's configuration (whose caBundle the operator keeps for all).
func deployAtStartOperatorWith(tb testing.TB, prefix string, extra []admissionregistrationv1.MutatingWebhook, setups ...operatorSetup) atStartOperator {
	tb.Helper()
	ctx := tb.Context()
	op := atStartOperator{ns: tbNamespace(tb, prefix)}
	op.config = webhookConfigName + "-" + op.ns
	op.installWebhook(tb, extra)
	deployOperator(tb, op.ns, append([]operatorSetup{withArgs("--webhook=on", "--webhook-configuration="+op.config)}, setups...)...)
	waitFor(tb, 2*time.Minute, "the caBundle of "+op.config, func() (bool, string) {
		c, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, op.config, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, w := range c.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 {
				return false, "webhook " + w.Name + " has no caBundle"
			}
		}
		return len(c.Webhooks) > 0, "no webhooks"
	})
	return op
}

// tbNamespace is newNamespace for a test or a benchmark.
func tbNamespace(tb testing.TB, prefix string) string {
	tb.Helper()
	ns, err := env.CreateNamespace(tb.Context(), prefix)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	return ns
}

// installWebhook creates the webhook's objects of webhookFiles for op: the
// namespaced ones in op.ns, the cluster-scoped ones renamed after op.config
// (and deleted at the end of the test), with the extra webhooks (limited to
// op.ns) in the configuration.
func (op atStartOperator) installWebhook(tb testing.TB, extra []admissionregistrationv1.MutatingWebhook) {
	tb.Helper()
	ctx := tb.Context()
	rename := func(name string) string { return name + "-" + op.ns }
	var cleanups []func(context.Context) error
	tb.Cleanup(func() {
		for _, c := range slices.Backward(cleanups) {
			_ = c(context.Background())
		}
	})
	onlyHere := func() *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: op.ns}}
	}
	sawConfig := false
	for _, rel := range webhookFiles {
		for _, obj := range decodeManifests(tb, rel) {
			var err error
			switch o := obj.(type) {
			case *corev1.Service:
				_, err = kube.CoreV1().Services(op.ns).Create(ctx, o, metav1.CreateOptions{})
			case *rbacv1.Role:
				_, err = kube.RbacV1().Roles(op.ns).Create(ctx, o, metav1.CreateOptions{})
			case *rbacv1.RoleBinding:
				for i := range o.Subjects {
					o.Subjects[i].Namespace = op.ns
				}
				_, err = kube.RbacV1().RoleBindings(op.ns).Create(ctx, o, metav1.CreateOptions{})
			case *rbacv1.ClusterRole:
				o.Name = rename(o.Name)
				for i, r := range o.Rules {
					if slices.Contains(r.Resources, "mutatingwebhookconfigurations") {
						o.Rules[i].ResourceNames = []string{op.config}
					}
				}
				_, err = kube.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
				name := o.Name
				cleanups = append(cleanups, func(ctx context.Context) error {
					return kube.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
				})
			case *rbacv1.ClusterRoleBinding:
				o.Name = rename(o.Name)
				o.RoleRef.Name = rename(o.RoleRef.Name)
				for i := range o.Subjects {
					o.Subjects[i].Namespace = op.ns
				}
				_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
				name := o.Name
				cleanups = append(cleanups, func(ctx context.Context) error {
					return kube.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
				})
			case *admissionregistrationv1.MutatingWebhookConfiguration:
				sawConfig = true
				o.Name = op.config
				for i := range o.Webhooks {
					w := &o.Webhooks[i]
					// Where kustomize puts the namespace.
					if w.ClientConfig.Service == nil || w.ClientConfig.Service.Name != webhookServiceName {
						tb.Fatalf("%s: webhook %s does not call the Service %s: %+v", rel, w.Name, webhookServiceName, w.ClientConfig)
					}
					w.ClientConfig.Service.Namespace = op.ns
					if w.NamespaceSelector == nil || w.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == "" {
						tb.Fatalf("%s: webhook %s does not select one namespace by %s: %+v", rel, w.Name, corev1.LabelMetadataName, w.NamespaceSelector)
					}
					w.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] = op.ns
				}
				for _, w := range extra {
					w.NamespaceSelector = onlyHere()
					o.Webhooks = append(o.Webhooks, w)
				}
				_, err = kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, o, metav1.CreateOptions{})
				cleanups = append(cleanups, func(ctx context.Context) error {
					return kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, op.config, metav1.DeleteOptions{})
				})
			default:
				tb.Fatalf("%s: unexpected %T", rel, obj)
			}
			if err != nil && !apierrors.IsAlreadyExists(err) {
				tb.Fatalf("%s: %v", rel, err)
			}
		}
	}
	if !sawConfig {
		tb.Fatalf("%v hold no MutatingWebhookConfiguration", webhookFiles)
	}
}

// withMode sets the exporter's injection mode.
func withMode(m jmxv1alpha1.InjectionMode) func(*jmxv1alpha1.PrometheusJmxExporter) {
	return func(ex *jmxv1alpha1.PrometheusJmxExporter) { ex.Spec.Injection.Mode = m }
}

// waitWebhookInjects waits until the apiserver, through the operator's
// webhook (its Service), gives the agent to a pod with these labels in ns:
// a dry-run creation, which calls the webhook (sideEffects None) and stores
// nothing, returns the pod with the record annotation. It is the condition
// for "the webhook serves and the operator knows the exporter", before the
// tests create pods that must be injected.
func waitWebhookInjects(tb testing.TB, ns string, labels map[string]string, exporterName string) {
	tb.Helper()
	probe := jvmPod("webhook-probe", labels, testimages.JVMAppRef)
	waitFor(tb, 2*time.Minute, "the webhook injects pods of "+exporterName+" in "+ns, func() (bool, string) {
		p, err := kube.CoreV1().Pods(ns).Create(tb.Context(), probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		rec, ok, err := atstart.ParseRecord(p)
		if err != nil || !ok {
			return false, fmt.Sprintf("not injected (record %v, %v)", ok, err)
		}
		return rec.Exporter == exporterName, "record names " + rec.Exporter
	})
}

// atStartRecord returns the pod's start-time record, failing the test when
// it has none.
func atStartRecord(t *testing.T, pod *corev1.Pod) atstart.Record {
	t.Helper()
	rec, ok, err := atstart.ParseRecord(pod)
	if err != nil || !ok {
		t.Fatalf("pod %s: no start-time record (%v, %v); annotations %v", pod.Name, ok, err, pod.Annotations)
	}
	return rec
}

// endpointOf waits until the exporter's status lists an endpoint of pod and
// returns it.
func endpointOf(t *testing.T, ns, exporterName, pod string) jmxv1alpha1.MetricsEndpoint {
	t.Helper()
	var ep jmxv1alpha1.MetricsEndpoint
	waitFor(t, 3*time.Minute, "an endpoint of "+pod+" in "+exporterName, func() (bool, string) {
		ex := getExporter(t, ns, exporterName)
		for _, e := range ex.Status.MetricsEndpoints {
			if e.Pod == pod {
				ep = e
				return true, ""
			}
		}
		return false, fmt.Sprintf("endpoints %+v, conditions %+v", ex.Status.MetricsEndpoints, ex.Status.Conditions)
	})
	return ep
}

// servedFromStart checks what a pod injected at start must show: the record
// names the exporter, the status lists its endpoint injected AtStart on the
// record's port, the agent serves there, the JVM printed exactly one agent
// line (serving), and no attach was ever attempted: no ephemeral container
// (the only live path of an operator without the Exec strategy), for a
// deliberate pause of hold, checked every second.
func servedFromStart(t *testing.T, ns, exporterName, podName string, hold time.Duration) (*corev1.Pod, string) {
	t.Helper()
	pod := waitRunning(t, ns, podName)
	rec := atStartRecord(t, pod)
	if rec.Exporter != exporterName || len(rec.Containers) != 1 || rec.Containers[0] != "app" {
		t.Errorf("pod %s: record %+v, want exporter %s and container app", podName, rec, exporterName)
	}
	ep := endpointOf(t, ns, exporterName, podName)
	if ep.InjectedBy != jmxv1alpha1.InjectedByAtStart || ep.Port != rec.Port || ep.Container != "app" {
		t.Errorf("pod %s: endpoint %+v, want injectedBy AtStart on port %d of app", podName, ep, rec.Port)
	}
	body := waitScrape(t, pod.Status.PodIP, rec.Port, heapMetric)
	holds(t, hold, "no attach to "+podName, func() (bool, string) {
		p := waitRunning(t, ns, podName)
		n := len(p.Spec.EphemeralContainers)
		return n == 0, fmt.Sprintf("%d ephemeral containers", n)
	})
	if n, lines := agentLoads(t, ns, podName, "app"); n != 1 || !strings.Contains(lines[0], "serving on :") {
		t.Errorf("pod %s: agent lines %q, want exactly one, serving", podName, lines)
	}
	return pod, body
}

// TestAtStart holds the proofs that share one operator with its webhook, in
// its namespace, each with an exporter (and labels) of its own.
func TestAtStart(t *testing.T) {
	t.Parallel()
	op := deployAtStartOperator(t, "e2e-atstart")
	runTogether(t,
		subtest{"AttachRefusedThenARolloutServesFromStart", func(t *testing.T) { attachRefusedThenRollout(t, op.ns) }},
		subtest{"RestartOnRefusalEvictsThePodAndItsReplacementServesFromStart", func(t *testing.T) { restartOnRefusal(t, op.ns) }},
		subtest{"TheContainersJavaToolOptionsAndTheAgentBothApply", func(t *testing.T) { usersOptionsKept(t, op.ns) }},
		subtest{"JDK25WarnsOfADynamicLoadButNotOfTheAgentAtStart", func(t *testing.T) { noDynamicLoadWarning(t, op.ns) }},
	)
}

// attachRefusedThenRollout: a JVM started with -XX:+DisableAttachMechanism
// in a Deployment selected by an exporter of mode Both is refused with
// AttachRefused (condition message and an Event on the pod saying that the
// pod gets the agent when it is next created); after a rollout, the new pod
// serves metrics from its start and no attach is attempted on it.
func attachRefusedThenRollout(t *testing.T, ns string) {
	ctx := t.Context()
	labels := map[string]string{"app": "noattach"}
	first := refusingDeployment(t, ns, "noattach", labels)
	createExporter(t, ns, exporter("noattach", labels, withMode(jmxv1alpha1.InjectionModeBoth)))
	// The only failure: Ready and Degraded say AttachRefused, and the
	// JVM's own reason is kept in the message.
	ex := waitCondition(t, ns, "noattach", jmxv1alpha1.ConditionDegraded, metav1.ConditionTrue, jmxv1alpha1.ReasonAttachRefused, 3*time.Minute)
	if c := findCond(ex.Status.Conditions, jmxv1alpha1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != jmxv1alpha1.ReasonAttachRefused {
		t.Errorf("Ready %s/%s, want False/%s", c.Status, c.Reason, jmxv1alpha1.ReasonAttachRefused)
	}
	if c := findCond(ex.Status.Conditions, jmxv1alpha1.ConditionDegraded); !strings.Contains(c.Message, jmxv1alpha1.ReasonAttachDisabled) {
		t.Errorf("Degraded message %q does not name the JVM's reason %s", c.Message, jmxv1alpha1.ReasonAttachDisabled)
	}
	var refused corev1.Event
	waitFor(t, time.Minute, "an AttachRefused event on "+first, func() (bool, string) {
		for _, e := range events(t, ns, "Pod", first) {
			if e.Reason == jmxv1alpha1.ReasonAttachRefused {
				refused = e
				return true, ""
			}
		}
		return false, "none"
	})
	if !strings.Contains(refused.Message, "next created") {
		t.Errorf("the AttachRefused event %q does not say the pod gets the agent when it is next created", refused.Message)
	}
	// The refused attempt was an ephemeral container: what servedFromStart
	// counts on the new pod can be seen.
	if n := len(waitRunning(t, ns, first).Spec.EphemeralContainers); n != 1 {
		t.Errorf("the refusing pod has %d ephemeral containers, want the 1 of its refused attach", n)
	}
	// kubectl rollout restart: a new template annotation.
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`,
		time.Now().Format(time.RFC3339))
	if _, err := kube.AppsV1().Deployments(ns).Patch(ctx, "noattach", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	second := deploymentPod(t, ns, labels, first)
	servedFromStart(t, ns, "noattach", second, 10*time.Second)
	if hasEvent(events(t, ns, "Pod", second), jmxv1alpha1.ReasonAttachRefused) {
		t.Errorf("the new pod got an %s event", jmxv1alpha1.ReasonAttachRefused)
	}
	waitCondition(t, ns, "noattach", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected, 2*time.Minute)
}

// createDeployment creates the Deployment name of replicas copies of pod
// (its spec; labels select them) in ns.
func createDeployment(t *testing.T, ns, name string, labels map[string]string, replicas int32, pod *corev1.Pod) {
	t.Helper()
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod.Spec},
		},
	}
	if _, err := kube.AppsV1().Deployments(ns).Create(t.Context(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// refusingDeployment creates a Deployment of one JVM pod started with
// -XX:+DisableAttachMechanism, waits until its pod runs and returns the pod's
// name.
func refusingDeployment(t *testing.T, ns, name string, labels map[string]string) string {
	t.Helper()
	pod := jvmPod("", labels, testimages.JVMAppRef,
		javaOptions("-Xmx48m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:+DisableAttachMechanism"))
	createDeployment(t, ns, name, labels, 1, pod)
	return deploymentPod(t, ns, labels, "")
}

// restartOnRefusal: with restartOnRefusal, the pod whose JVM refuses a live
// attach is evicted (an Event says so) and its replacement serves metrics
// from its start; no eviction follows.
func restartOnRefusal(t *testing.T, ns string) {
	labels := map[string]string{"app": "evicted"}
	first := refusingDeployment(t, ns, "evicted", labels)
	createExporter(t, ns, exporter("evicted", labels, withMode(jmxv1alpha1.InjectionModeBoth),
		func(ex *jmxv1alpha1.PrometheusJmxExporter) { ex.Spec.Injection.RestartOnRefusal = true }))
	waitFor(t, 3*time.Minute, "an "+jmxv1alpha1.ReasonEvictedOnRefusal+" event on "+first, func() (bool, string) {
		evs := events(t, ns, "Pod", first)
		var reasons []string
		for _, e := range evs {
			reasons = append(reasons, e.Reason)
		}
		return hasEvent(evs, jmxv1alpha1.ReasonEvictedOnRefusal), fmt.Sprintf("events %v", reasons)
	})
	second := deploymentPod(t, ns, labels, first)
	servedFromStart(t, ns, "evicted", second, 10*time.Second)
	waitCondition(t, ns, "evicted", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected, 2*time.Minute)
	if evs := events(t, ns, "Pod", second); hasEvent(evs, jmxv1alpha1.ReasonEvictedOnRefusal) {
		t.Errorf("the replacement %s was evicted too", second)
	}
}

// deploymentPod waits until exactly one pod with labels runs in ns, not
// being deleted and not named not, and returns its name.
func deploymentPod(t *testing.T, ns string, labels map[string]string, not string) string {
	t.Helper()
	var name string
	waitFor(t, 3*time.Minute, "the Deployment's pod", func() (bool, string) {
		list, err := kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{
			LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: labels})})
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Name != not {
				names = append(names, p.Name)
			}
		}
		if len(names) != 1 {
			return false, fmt.Sprintf("pods %v", names)
		}
		name = names[0]
		return true, ""
	})
	waitRunning(t, ns, name)
	return name
}

// usersOptionsKept: a pod created after an exporter of mode AtStart, whose
// container sets JAVA_TOOL_OPTIONS itself, gets the agent appended to the
// user's options, and the JVM applies both: the agent serves, and the heap's
// maximum it reports is the user's -Xmx.
func usersOptionsKept(t *testing.T, ns string) {
	labels := map[string]string{"app": "useropts"}
	createExporter(t, ns, exporter("useropts", labels, withMode(jmxv1alpha1.InjectionModeAtStart)))
	waitWebhookInjects(t, ns, labels, "useropts")
	const userOptions = "-Xmx40m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
	createPod(t, ns, jvmPod("useropts", labels, testimages.JVMAppRef, javaOptions(userOptions)))
	pod, body := servedFromStart(t, ns, "useropts", "useropts", 5*time.Second)
	var value string
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == atstart.JavaToolOptions {
			value = e.Value
		}
	}
	rec := atStartRecord(t, pod)
	if want := userOptions + " " + atstart.AgentOption(atstart.MountPath+testimages.AgentJarPath, rec.Port); value != want {
		t.Errorf("JAVA_TOOL_OPTIONS %q, want %q", value, want)
	}
	// The JVM read the whole value: its "Picked up" line shows both.
	if logs := containerLogs(t, ns, "useropts", "app"); !strings.Contains(logs, "Picked up JAVA_TOOL_OPTIONS: "+value) {
		t.Errorf("the JVM's log does not show it picked up %q:\n%s", value, logs)
	}
	// And applied the user's part: the heap's maximum, as the agent
	// reports it, is at most the user's 40 MiB (the JVM's default here
	// would be a quarter of the machine's memory).
	heapMax, ok := metricValue(body, `jvm_memory_max_bytes{area="heap"}`)
	if !ok || heapMax <= 0 || heapMax > 40<<20 {
		t.Errorf("jvm_memory_max_bytes{area=\"heap\"} = %v (found %v), want at most -Xmx40m", heapMax, ok)
	}
	waitCondition(t, ns, "useropts", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected, 2*time.Minute)
}

// dynamicLoadWarning is what JDK 21+ prints on stderr when an agent is loaded
// into a running JVM (JEP 451).
const dynamicLoadWarning = "WARNING: A Java agent has been loaded dynamically"

// noDynamicLoadWarning: under one exporter of mode Both, a Temurin 25 JVM
// that ran before the exporter is attached and prints JEP 451's warning
// (so the check can see it), and one created after gets the agent at start
// and prints none.
func noDynamicLoadWarning(t *testing.T, ns string) {
	if _, err := os.Stat(testimages.Temurin25Home + "/bin/java"); err != nil {
		t.Skipf("no Temurin 25 JDK at %s to build the image from (install one there to run this test): %v", testimages.Temurin25Home, err)
	}
	needImage(t, testimages.Temurin25JVMRef, testimages.BuildTemurin25JVM)
	labels := map[string]string{"app": "jdk25"}
	createPod(t, ns, jvmPod("attached", labels, testimages.Temurin25JVMRef))
	waitRunning(t, ns, "attached")
	createExporter(t, ns, exporter("jdk25", labels, withMode(jmxv1alpha1.InjectionModeBoth)))
	// The attached JVM tries the new exporter's change first (the leader's
	// claim holds pods being created back): the pod at start comes once a
	// JVM has run it for the breaker window.
	ep := endpointOf(t, ns, "jdk25", "attached")
	waitFor(t, 2*time.Minute, "the change proven by the attached JVM", func() (bool, string) {
		ex := getExporter(t, ns, "jdk25")
		return ex.Status.Proven != nil && ex.Status.Proven.Generation == ex.Generation && ex.Status.AtStartCanary == nil,
			fmt.Sprintf("proven %+v, claim %+v", ex.Status.Proven, ex.Status.AtStartCanary)
	})
	waitWebhookInjects(t, ns, labels, "jdk25")
	createPod(t, ns, jvmPod("atstart", labels, testimages.Temurin25JVMRef))
	if ep.InjectedBy == jmxv1alpha1.InjectedByAtStart {
		t.Errorf("the pod that ran before the exporter is reported injected at start: %+v", ep)
	}
	waitScrape(t, ep.PodIP, ep.Port, heapMetric)
	waitFor(t, time.Minute, "JEP 451's warning in the attached JVM's log", func() (bool, string) {
		logs := containerLogs(t, ns, "attached", "app")
		return strings.Contains(logs, dynamicLoadWarning), logs
	})
	servedFromStart(t, ns, "jdk25", "atstart", 5*time.Second)
	if logs := containerLogs(t, ns, "atstart", "app"); strings.Contains(logs, dynamicLoadWarning) {
		t.Errorf("the JVM given the agent at start warns:\n%s", logs)
	}
}

// TestWebhookDownPodsStillCreate: with the operator scaled to 0 (its webhook
// down), pods still create (failurePolicy Ignore), without the agent; once
// the operator is back, the pod of an AtStart exporter is reported
// NotInjectedAtStart and never attached, the pod of a Both exporter is
// attached, and a pod created then gets the agent at start again.
func TestWebhookDownPodsStillCreate(t *testing.T) {
	t.Parallel()
	op := deployAtStartOperator(t, "e2e-hookdown")
	ns := op.ns
	ctx := t.Context()
	atStartLabels := map[string]string{"app": "atstart"}
	bothLabels := map[string]string{"app": "both"}
	createExporter(t, ns, exporter("atstart", atStartLabels, withMode(jmxv1alpha1.InjectionModeAtStart)))
	createExporter(t, ns, exporter("both", bothLabels, withMode(jmxv1alpha1.InjectionModeBoth)))
	// The webhook injects both exporters' pods while it is up.
	waitWebhookInjects(t, ns, atStartLabels, "atstart")
	waitWebhookInjects(t, ns, bothLabels, "both")
	scaleOperator(t, op.ns, 0)
	for _, name := range []string{"atstart", "both"} {
		labels := map[string]string{"app": name}
		start := time.Now()
		pod := createPod(t, ns, jvmPod(name, labels, testimages.JVMAppRef))
		t.Logf("pod %s created in %s with the webhook down", name, time.Since(start).Round(time.Millisecond))
		if _, ok, err := atstart.ParseRecord(pod); ok || err != nil {
			t.Errorf("pod %s was given the agent at start with the webhook down: %v", name, pod.Annotations)
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name == atstart.VolumeName {
				t.Errorf("pod %s has the agent's volume", name)
			}
		}
	}
	waitRunning(t, ns, "atstart")
	waitRunning(t, ns, "both")
	scaleOperator(t, op.ns, 1)
	// AtStart: reported, never attached.
	ex := waitCondition(t, ns, "atstart", jmxv1alpha1.ConditionReady, metav1.ConditionFalse, jmxv1alpha1.ReasonNotInjectedAtStart, 3*time.Minute)
	if c := findCond(ex.Status.Conditions, jmxv1alpha1.ConditionReady); !strings.Contains(c.Message, "atstart") {
		t.Errorf("Ready message %q does not name the pod", c.Message)
	}
	// Both: attached.
	ep := checkInjected(t, ns, "both", "both", jmxv1alpha1.DefaultPort)
	if ep.InjectedBy == jmxv1alpha1.InjectedByAtStart {
		t.Errorf("the pod created with the webhook down is reported injected at start: %+v", ep)
	}
	waitScrape(t, ep.PodIP, ep.Port, heapMetric)
	holds(t, 10*time.Second, "no attach to the AtStart exporter's pod", func() (bool, string) {
		p := waitRunning(t, ns, "atstart")
		n := len(p.Spec.EphemeralContainers)
		return n == 0, fmt.Sprintf("%d ephemeral containers", n)
	})
	if ex := getExporter(t, ns, "atstart"); len(ex.Status.MetricsEndpoints) != 0 {
		t.Errorf("the AtStart exporter lists endpoints: %+v", ex.Status.MetricsEndpoints)
	}
	// The webhook is back: a new pod of the AtStart exporter gets the agent
	// at start, and the exporter becomes Ready once the old one is gone.
	waitWebhookInjects(t, ns, atStartLabels, "atstart")
	createPod(t, ns, jvmPod("atstart-again", atStartLabels, testimages.JVMAppRef))
	servedFromStart(t, ns, "atstart", "atstart-again", time.Second)
	if err := kube.CoreV1().Pods(ns).Delete(ctx, "atstart", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, ns, "atstart", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected, 2*time.Minute)
}

// scaleOperator sets the operator's replicas and waits until exactly that
// many of its pods exist, all ready (none at 0: the webhook's Service then has
// no endpoint).
func scaleOperator(t *testing.T, ns string, n int32) {
	t.Helper()
	ctx := t.Context()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"replicas": n}})
	if _, err := kube.AppsV1().Deployments(ns).Patch(ctx, operatorName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Minute, fmt.Sprintf("%d operator pods, ready", n), func() (bool, string) {
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + operatorName})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, p := range list.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready++
				}
			}
		}
		return len(list.Items) == int(n) && ready == int(n), fmt.Sprintf("%d pods, %d ready", len(list.Items), ready)
	})
}

// BenchmarkPodCreationToFirstScrape measures, over 20 JVM pods created one
// after another while an exporter selects them, the time from each pod's
// creation (the moment the test sends it) to the first good scrape of its
// agent through the pod IP, polled every 50 ms from the moment the pod has an
// IP: with live attach (mode Attach, the EphemeralContainer strategy) and
// with the agent given at start by the operator's webhook (mode AtStart).
// Creation, not the JVM's start, is where the two paths can be compared: at
// start, the agent is in place before the JVM runs, and the webhook's share
// is in the creation. It reports p50, p99 and the maximum in seconds, the
// p50 from the JVM's start (read from /proc on this host, as
// BenchmarkJVMStartToFirstScrape does) to the scrape, and the first pod apart
// (first-s): with either mode it opens the exporter's change, and the others wait
// until it has run the breaker window (docs/operator.md, Safety), a
// configured time the benchmark lets pass before the pods it measures.
//
//	go test -run '^$' -bench PodCreationToFirstScrape -benchtime 1x ./test/e2e/
func BenchmarkPodCreationToFirstScrape(b *testing.B) {
	for _, mode := range []jmxv1alpha1.InjectionMode{jmxv1alpha1.InjectionModeAttach, jmxv1alpha1.InjectionModeAtStart} {
		b.Run(string(mode), func(b *testing.B) { benchCreationToScrape(b, mode) })
	}
}

func benchCreationToScrape(b *testing.B, mode jmxv1alpha1.InjectionMode) {
	const pods = 21 // the first one opens the exporter's change
	window := withArgs("--breaker-window=" + operator.DefaultBreakerWindow.String())
	labels := map[string]string{"app": "bench"}
	for i := 0; i < b.N; i++ {
		var ns string
		if mode == jmxv1alpha1.InjectionModeAttach {
			ns = tbNamespace(b, "bench-attach")
			deployOperator(b, ns, window)
		} else {
			ns = deployAtStartOperator(b, "bench-atstart", window).ns
		}
		ex := exporter("bench", labels, withMode(mode))
		if _, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Create(b.Context(), ex, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if mode == jmxv1alpha1.InjectionModeAtStart {
			waitWebhookInjects(b, ns, labels, "bench")
		}
		var lat, fromJVM []float64
		for p := 0; p < pods; p++ {
			name := fmt.Sprintf("jvm-%02d", p)
			created := time.Now()
			if _, err := kube.CoreV1().Pods(ns).Create(b.Context(), jvmPod(name, labels, testimages.JVMAppRef), metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			total, jvmToScrape, err := creationToScrape(ns, name, created, 3*time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			if p == 0 {
				b.ReportMetric(total.Seconds(), "first-s")
				// A deliberate pause: the configured window, see above. The
				// first pod tries the change alone, by either path; the
				// others get the agent once it is proven.
				time.Sleep(operator.DefaultBreakerWindow + 2*time.Second)
				waitFor(b, 2*time.Minute, "the change proven", func() (bool, string) {
					ex, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Get(b.Context(), "bench", metav1.GetOptions{})
					if err != nil {
						return false, err.Error()
					}
					return ex.Status.Proven != nil && ex.Status.Proven.Generation == ex.Generation, fmt.Sprintf("%+v", ex.Status.Proven)
				})
				continue
			}
			lat = append(lat, total.Seconds())
			fromJVM = append(fromJVM, jvmToScrape.Seconds())
		}
		sort.Float64s(lat)
		sort.Float64s(fromJVM)
		b.ReportMetric(quantile(lat, 0.5), "p50-s")
		b.ReportMetric(quantile(lat, 0.99), "p99-s")
		b.ReportMetric(lat[len(lat)-1], "max-s")
		b.ReportMetric(quantile(fromJVM, 0.5), "jvm-p50-s")
	}
}

// creationToScrape polls the pod's agent from the moment the pod has an IP,
// and returns the times from created, and from the JVM's start (jvmStart),
// until the first good scrape.
func creationToScrape(ns, pod string, created time.Time, timeout time.Duration) (time.Duration, time.Duration, error) {
	deadline := created.Add(timeout)
	ip, containerID := "", ""
	var scraped time.Time
	for time.Now().Before(deadline) {
		if ip == "" || containerID == "" {
			if p, err := kube.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{}); err == nil {
				ip = p.Status.PodIP
				if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil {
					containerID = p.Status.ContainerStatuses[0].ContainerID
				}
			}
		}
		if ip != "" {
			if body, err := scrape(ip, jmxv1alpha1.DefaultPort); err == nil {
				if _, ok := metricValue(body, heapMetric); ok {
					scraped = time.Now()
					break
				}
			}
		}
		time.Sleep(50 * time.Millisecond) // the poll interval (the latency's resolution) of a wait with the caller's deadline
	}
	if scraped.IsZero() {
		return 0, 0, fmt.Errorf("%s: no scrape within %s", pod, timeout)
	}
	for containerID == "" && time.Now().Before(deadline) {
		if p, err := kube.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{}); err == nil &&
			len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil {
			containerID = p.Status.ContainerStatuses[0].ContainerID
		}
		time.Sleep(50 * time.Millisecond) // the poll interval of a wait with the caller's deadline
	}
	started, err := jvmStart(containerID)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", pod, err)
	}
	return scraped.Sub(created), scraped.Sub(started), nil
}

// TestAtStartThroughAnInitContainer: with --at-start-delivery=init-container
// (for clusters without image volumes) the jar reaches the pod through an
// init container of the agent image, which copies it (jmx-attach
// copy-agent) into an emptyDir; the JVM starts with the agent and serves
// from its start, and no attach is attempted.
func TestAtStartThroughAnInitContainer(t *testing.T) {
	t.Parallel()
	op := deployAtStartOperator(t, "e2e-atstart-init", withArgs("--at-start-delivery=init-container"))
	labels := map[string]string{"app": "initcopy"}
	createExporter(t, op.ns, exporter("initcopy", labels, withMode(jmxv1alpha1.InjectionModeAtStart)))
	waitWebhookInjects(t, op.ns, labels, "initcopy")
	createPod(t, op.ns, jvmPod("initcopy", labels, testimages.JVMAppRef))
	pod, _ := servedFromStart(t, op.ns, "initcopy", "initcopy", 2*time.Second)
	if rec := atStartRecord(t, pod); rec.Delivery != atstart.DeliveryInitContainer {
		t.Errorf("record %+v, want delivery %s", rec, atstart.DeliveryInitContainer)
	}
	var vol *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == atstart.VolumeName {
			vol = &pod.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.EmptyDir == nil || vol.Image != nil {
		t.Errorf("volume %s = %+v, want an emptyDir", atstart.VolumeName, vol)
	}
	copied := false
	for _, s := range pod.Status.InitContainerStatuses {
		if s.Name == atstart.InitContainerName && s.State.Terminated != nil && s.State.Terminated.ExitCode == 0 {
			copied = true
		}
	}
	if !copied {
		t.Errorf("init container statuses %+v, want %s ended with exit status 0", pod.Status.InitContainerStatuses, atstart.InitContainerName)
	}
}
