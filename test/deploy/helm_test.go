package deploy

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/handlerkit/handlerkit/internal/manifest"
	"github.com/handlerkit/handlerkit/internal/testbuild"
	"github.com/handlerkit/handlerkit/pkg/webhook"
)

const chartDir = "charts/prometheus-jmx-exporter-operator"

// helmCommand is one command of test/helm, built once per test binary into
// a directory that TestMain removes: test/helm is a module of its own, so
// that Helm never enters handlerkit's go.mod.
type helmCommand struct {
	name string // the directory under test/helm/cmd
}

var (
	// helmRender renders the chart the way `helm template` does.
	helmRender = &helmCommand{name: "helm-render"}
	// helmRelease runs the Helm library's install, upgrade and uninstall.
	helmRelease = &helmCommand{name: "helm-release"}
	// helmBin is where both are built.
	helmBin = filepath.Join(os.TempDir(), fmt.Sprintf("handlerkit-test-deploy-%d", os.Getpid()))
)

// helmBuild builds test/helm's commands, both in one go build, once per test
// binary: TestMain starts it beside the tests that need no Helm, and the
// first test that needs a command waits for it.
var helmBuild struct {
	once sync.Once
	err  error
}

// buildHelmCommands runs helmBuild (ctx ends a build no test waits for).
func buildHelmCommands(ctx context.Context) error {
	helmBuild.once.Do(func() {
		// With the flags of this test binary (testbuild.Flags), so that
		// test/helm's own tests, later in make test, find Helm's packages
		// compiled: on a cold machine each compile takes minutes. Kept
		// between runs (testbuild.Build), so a warm run links neither.
		if _, err := testbuild.Build(ctx, filepath.Join(repo, "test", "helm"), helmBin, testbuild.Flags(), nil,
			"./cmd/"+helmRender.name, "./cmd/"+helmRelease.name); err != nil {
			helmBuild.err = fmt.Errorf("building test/helm's commands: %w", err)
		}
	})
	return helmBuild.err
}

// built returns the command's path, waiting for the build.
func (c *helmCommand) built(t *testing.T) string {
	t.Helper()
	waitForHelmCommands(t)
	return filepath.Join(helmBin, c.name)
}

// waitForHelmCommands waits for test/helm's commands. A test that uses them
// calls it before its own deadline starts: on a cold machine the build takes
// minutes (Helm's and Kubernetes' packages compiled with -race beside the
// other lane), and those minutes are not the test's.
func waitForHelmCommands(t *testing.T) {
	t.Helper()
	if err := buildHelmCommands(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// renderChart renders the chart for release prometheus-jmx-exporter-operator
// in namespace with values (YAML) over the chart's, the way `helm template
// --include-crds` does. It returns the objects, or the render's error.
func renderChart(t *testing.T, namespace, values string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	render := helmRender.built(t)
	vals := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(vals, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(render, "-chart", filepath.Join(repo, chartDir), "-namespace", namespace, "-values", vals)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, stderr.String())
	}
	objs, err := manifest.Decode(stdout.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return objs, nil
}

// kindOrder is the order objects are applied in, as Helm installs them.
var kindOrder = []string{"CustomResourceDefinition", "ServiceAccount", "ConfigMap", "ClusterRole", "Role", "ClusterRoleBinding",
	"RoleBinding", "Service", "NetworkPolicy", "Deployment", "PodDisruptionBudget", "PrometheusRule", "MutatingWebhookConfiguration"}

// rulesOf returns the rules of the Roles or ClusterRoles in objs, by
// namespace/name.
func rulesOf(t *testing.T, objs []*unstructured.Unstructured, kind string) map[string][]rbacv1.PolicyRule {
	t.Helper()
	out := map[string][]rbacv1.PolicyRule{}
	for _, o := range objs {
		if o.GetKind() != kind {
			continue
		}
		var r rbacv1.Role
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
			t.Fatal(err)
		}
		out[path(o.GetNamespace(), r.Name)] = r.Rules
	}
	return out
}

func path(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func deploymentOf(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatal(err)
			}
			return &d
		}
	}
	t.Fatal("no Deployment")
	return nil
}

// withoutRules returns rules less those on resource.
func withoutRules(rules []rbacv1.PolicyRule, resources ...string) []rbacv1.PolicyRule {
	return slices.DeleteFunc(slices.Clone(rules), func(r rbacv1.PolicyRule) bool {
		return slices.ContainsFunc(r.Resources, func(res string) bool { return slices.Contains(resources, res) })
	})
}

// TestHelmChartRendersTheProvenRBACAndAppliesToTheAPIServer renders the chart
// with the Helm library for each choice its values offer, checks that its
// RBAC is deploy/overlays/exec's (which TestRBACIsExactlyWhatTheOperatorRequests
// proves) less exactly the rules of what is switched off (Exec by default),
// that its users' ClusterRoles are deploy/operator/user-roles's (which
// TestAggregatedRolesGiveNamespaceUsersExporters proves), that its
// Deployment passes the same hardening checks, and applies the output to
// the API server with a server-side dry run and then for real. The API
// server's authorizer then allows the release's ServiceAccount create
// pods/exec in a served namespace exactly when Exec is switched on.
func TestHelmChartRendersTheProvenRBACAndAppliesToTheAPIServer(t *testing.T) {
	env := cluster.Get(t)
	waitForHelmCommands(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a, err := manifest.NewApplier(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"helm-default", "helm-list", "helm-a", "helm-b", "helm-all", "helm-exec", "helm-both", "helm-minimal"} {
		_, err := env.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	const op = "prometheus-jmx-exporter-operator"
	deployRoles := roles(t, namespacedExec, "Role")
	served := deployRoles[op].Rules
	homeRules := deployRoles[op+"-home"].Rules
	ephemeral := deployRoles[op+"-ephemeralcontainer"].Rules
	execRules := deployRoles[op+"-exec"].Rules
	eviction := deployRoles[op+"-eviction"].Rules
	if len(eviction) == 0 {
		t.Fatalf("%s has no -eviction Role", namespacedExec)
	}
	atstartRules := deployRoles[op+"-atstart"].Rules
	if len(atstartRules) == 0 {
		t.Fatalf("%s has no -atstart Role", namespacedExec)
	}
	userRoles := build(t, "deploy/operator/user-roles")
	userRules := rulesOf(t, userRoles, "ClusterRole")
	if len(userRules) != 2 {
		t.Fatalf("deploy/operator/user-roles: ClusterRoles %v, want -view and -edit", userRules)
	}

	cases := []struct {
		name, namespace, values string
		roles, clusterRoles     map[string][]rbacv1.PolicyRule
		watch                   string // WATCH_NAMESPACE; "fieldRef": the pod's namespace
		args                    []string
		exec                    bool     // Exec switched on: pods/exec allowed where served
		servedNS                []string // namespaces served, where pods/exec is asked about; default the release's
		noUserRoles             bool     // aggregatedRoles: false
	}{{
		name: "defaults: the release namespace, EphemeralContainer only", namespace: "helm-default",
		roles: map[string][]rbacv1.PolicyRule{
			"helm-default/" + op: served, "helm-default/" + op + "-ephemeralcontainer": ephemeral,
			"helm-default/" + op + "-home": homeRules},
		watch: "fieldRef",
		args: []string{"--leader-election=lease", "--strategies=EphemeralContainer", "--default-strategy=EphemeralContainer",
			"--pod-monitors=true", "--metrics-service=every-replica"},
	}, {
		name: "several namespaces, more agent images", namespace: "helm-list",
		values: "watchNamespaces: [helm-a, helm-b]\nagent: {allowedImages: [team/jmx-agent:v2, jmx-agent:v0.1.0-debug]}\n",
		roles: map[string][]rbacv1.PolicyRule{
			"helm-a/" + op: served, "helm-a/" + op + "-ephemeralcontainer": ephemeral,
			"helm-b/" + op: served, "helm-b/" + op + "-ephemeralcontainer": ephemeral,
			"helm-list/" + op + "-home": homeRules},
		watch:    "helm-a,helm-b",
		args:     []string{"--allowed-agent-images=team/jmx-agent:v2,jmx-agent:v0.1.0-debug"},
		servedNS: []string{"helm-a", "helm-b"},
	}, {
		name: "every namespace", namespace: "helm-all", values: "watchAllNamespaces: true\n",
		roles: map[string][]rbacv1.PolicyRule{"helm-all/" + op + "-home": homeRules},
		clusterRoles: map[string][]rbacv1.PolicyRule{
			op: roles(t, clusterWideInstall, "ClusterRole")[op].Rules, op + "-ephemeralcontainer": ephemeral},
		watch:    "",
		servedNS: []string{"helm-all", "helm-a"},
	}, {
		name: "Exec only", namespace: "helm-exec", values: "strategies: {ephemeralContainer: false, exec: true}\n",
		roles: map[string][]rbacv1.PolicyRule{
			"helm-exec/" + op: served, "helm-exec/" + op + "-exec": execRules, "helm-exec/" + op + "-home": homeRules},
		watch: "fieldRef",
		args:  []string{"--strategies=Exec", "--default-strategy=Exec"},
		exec:  true,
	}, {
		name: "Exec as well", namespace: "helm-both", values: "strategies: {exec: true}\n",
		roles: map[string][]rbacv1.PolicyRule{
			"helm-both/" + op: served, "helm-both/" + op + "-ephemeralcontainer": ephemeral,
			"helm-both/" + op + "-exec": execRules, "helm-both/" + op + "-home": homeRules},
		watch: "fieldRef",
		args:  []string{"--strategies=EphemeralContainer,Exec", "--default-strategy=EphemeralContainer"},
		exec:  true,
	}, {
		name: "for-life, no PodMonitors, no metrics Service, no users' roles, no webhook, no eviction", namespace: "helm-minimal",
		values: "leaderElection: for-life\npodMonitors: false\nmetricsService: none\naggregatedRoles: false\nreportUnserved: false\n" +
			"webhook: {enabled: false}\nrestartOnRefusal: false\n",
		roles: map[string][]rbacv1.PolicyRule{
			"helm-minimal/" + op:                         withoutRules(served, "podmonitors", "prometheusjmxexporters/finalizers"),
			"helm-minimal/" + op + "-ephemeralcontainer": ephemeral,
			"helm-minimal/" + op + "-home": {
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "watch", "create", "delete"}},
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}}}},
		watch:       "fieldRef",
		args:        []string{"--leader-election=for-life", "--pod-monitors=false", "--metrics-service=none", "--webhook=off"},
		noUserRoles: true,
	}}
	// Every install but the minimal one has the webhook, with its RBAC
	// (webhook.PolicyRules in the release namespace, ClusterPolicyRules for
	// the configuration), and the eviction rule where it serves.
	for i, c := range cases {
		if strings.Contains(c.values, "webhook: {enabled: false}") {
			continue
		}
		if cases[i].clusterRoles == nil {
			cases[i].clusterRoles = map[string][]rbacv1.PolicyRule{}
		}
		cases[i].roles[c.namespace+"/"+op+"-webhook"] = webhook.PolicyRules(op+"-webhook-tls", false)
		cases[i].clusterRoles[op+"-webhook"] = webhook.ClusterPolicyRules(op)
		if strings.Contains(c.values, "watchAllNamespaces: true") {
			cases[i].clusterRoles[op+"-eviction"] = eviction
			cases[i].clusterRoles[op+"-atstart"] = atstartRules
			continue
		}
		servedNS := c.servedNS
		if servedNS == nil {
			servedNS = []string{c.namespace}
		}
		for _, ns := range servedNS {
			cases[i].roles[ns+"/"+op+"-eviction"] = eviction
			cases[i].roles[ns+"/"+op+"-atstart"] = atstartRules
		}
	}
	// A namespaced install reports exporters elsewhere (NotServed) through
	// the -unserved ClusterRole, as deploy/operator does, unless
	// reportUnserved is false; a cluster-wide one serves them instead.
	unserved := roles(t, namespacedExec, "ClusterRole")[op+"-unserved"].Rules
	if len(unserved) == 0 {
		t.Fatal("deploy/operator has no -unserved ClusterRole")
	}
	for i, c := range cases {
		if strings.Contains(c.values, "watchAllNamespaces: true") || strings.Contains(c.values, "reportUnserved: false") {
			continue
		}
		if cases[i].clusterRoles == nil {
			cases[i].clusterRoles = map[string][]rbacv1.PolicyRule{}
		}
		cases[i].clusterRoles[op+"-unserved"] = unserved
		cases[i].args = append(cases[i].args, "--report-unserved=true")
	}
	// Every install reads the namespaces' opt-out label (get on namespaces),
	// as deploy/operator and its cluster-wide install do.
	for i := range cases {
		if cases[i].clusterRoles == nil {
			cases[i].clusterRoles = map[string][]rbacv1.PolicyRule{}
		}
		cases[i].clusterRoles[op+"-namespaces"] = namespacesRules
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs, err := renderChart(t, c.namespace, c.values)
			if err != nil {
				t.Fatal(err)
			}
			if got := rulesOf(t, objs, "Role"); !reflect.DeepEqual(got, c.roles) {
				t.Errorf("Roles\n%v\nwant\n%v", got, c.roles)
			}
			wantCluster := maps.Clone(c.clusterRoles)
			if !c.noUserRoles {
				if wantCluster == nil {
					wantCluster = map[string][]rbacv1.PolicyRule{}
				}
				maps.Copy(wantCluster, userRules)
				checkSameAggregation(t, objs, userRoles)
			}
			if got := rulesOf(t, objs, "ClusterRole"); !reflect.DeepEqual(got, wantCluster) && len(got)+len(wantCluster) > 0 {
				t.Errorf("ClusterRoles\n%v\nwant\n%v", got, wantCluster)
			}
			if got := grantsPodsExec(t, objs); (len(got) > 0) != c.exec {
				t.Errorf("pods/exec granted by %v; want it granted: %v", got, c.exec)
			}
			d := deploymentOf(t, objs)
			checkChartDeployment(t, d)
			if !strings.Contains(c.values, "webhook: {enabled: false}") {
				servedNS := c.servedNS
				if servedNS == nil {
					servedNS = []string{c.namespace}
				}
				checkChartWebhook(t, objs, d, c.namespace, servedNS, strings.Contains(c.values, "watchAllNamespaces: true"))
			}
			args := d.Spec.Template.Spec.Containers[0].Args
			// No --agent-image: the operator reads its own image from its pod,
			// so whatever renames the image (a post-renderer) moves the agent.
			if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--agent-image") }) {
				t.Errorf("args %v pass --agent-image: the operator's own image is the agent image", args)
			}
			if !strings.Contains(c.values, "allowedImages") && slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--allowed-agent-images") }) {
				t.Errorf("args %v: --allowed-agent-images without agent.allowedImages", args)
			}
			watch := envVar(t, d, "WATCH_NAMESPACE")
			switch {
			case c.watch == "fieldRef" && (watch.ValueFrom == nil || watch.ValueFrom.FieldRef.FieldPath != "metadata.namespace"):
				t.Errorf("WATCH_NAMESPACE %+v, want the pod's namespace", watch)
			case c.watch != "fieldRef" && (watch.ValueFrom != nil || watch.Value != c.watch):
				t.Errorf("WATCH_NAMESPACE %+v, want %q", watch, c.watch)
			}
			for _, arg := range c.args {
				if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, arg) {
					t.Errorf("args %v lack %s", d.Spec.Template.Spec.Containers[0].Args, arg)
				}
			}
			for _, o := range objs {
				if !slices.Contains(kindOrder, o.GetKind()) {
					t.Errorf("unexpected %s %s", o.GetKind(), o.GetName())
				}
			}
			slices.SortStableFunc(objs, func(x, y *unstructured.Unstructured) int {
				return slices.Index(kindOrder, x.GetKind()) - slices.Index(kindOrder, y.GetKind())
			})
			if err := a.DryRun(ctx, c.namespace, objs...); err != nil {
				t.Fatalf("server-side dry run: %v", err)
			}
			if err := a.Apply(ctx, c.namespace, objs...); err != nil {
				t.Fatalf("apply: %v", err)
			}
			if left, err := a.Missing(ctx, c.namespace, objs...); err != nil || len(left) != 0 {
				t.Fatalf("after apply %d objects are missing (%v)", len(left), err)
			}

			// The authorizer, once it has seen the release's bindings.
			kube := env.Clientset()
			l := layout{home: c.namespace, served: c.namespace}
			if err := waitCaughtUp(ctx, kube, l, "test-sentinel-"+c.namespace); err != nil {
				t.Fatal(err)
			}
			servedNS := c.servedNS
			if servedNS == nil {
				servedNS = []string{c.namespace}
			}
			for _, ns := range servedNS {
				ok, err := allowed(ctx, kube, l.user(op), ns, execRequest)
				if err != nil {
					t.Fatal(err)
				}
				if ok != c.exec {
					t.Errorf("create pods/exec in %s allowed: %v, want %v", ns, ok, c.exec)
				}
				ok, err = allowed(ctx, kube, l.user(op), ns, ephemeralRequest)
				if err != nil {
					t.Fatal(err)
				}
				if want := !strings.Contains(c.values, "ephemeralContainer: false"); ok != want {
					t.Errorf("patch pods/ephemeralcontainers in %s allowed: %v, want %v", ns, ok, want)
				}
			}
		})
	}
}

// checkSameAggregation fails unless the chart's users' ClusterRoles carry
// the same aggregation labels as deploy/operator/user-roles's (want).
func checkSameAggregation(t *testing.T, objs, want []*unstructured.Unstructured) {
	t.Helper()
	labels := func(objs []*unstructured.Unstructured) map[string]map[string]string {
		out := map[string]map[string]string{}
		for _, o := range objs {
			if o.GetKind() != "ClusterRole" || !aggregated(o.GetLabels()) {
				continue
			}
			agg := map[string]string{}
			for k, v := range o.GetLabels() {
				if strings.HasPrefix(k, aggregateLabel) {
					agg[k] = v
				}
			}
			out[o.GetName()] = agg
		}
		return out
	}
	if got, w := labels(objs), labels(want); !reflect.DeepEqual(got, w) {
		t.Errorf("the chart's aggregation labels %v, deploy/operator/user-roles's %v", got, w)
	}
}

// TestHelmChartRefusesValuesThatCannotWork: the render fails, saying why,
// rather than installing an operator that cannot run.
func TestHelmChartRefusesValuesThatCannotWork(t *testing.T) {
	for values, why := range map[string]string{
		"leaderElection: none\n": "exactly one replica",
		"leaderElection: none\nreplicas: 1\nmetricsService: leader\n": "needs leader election",
		"strategies: {exec: false, ephemeralContainer: false}\n":      "at least one",
		"leaderElection: sometimes\n":                                 "'lease', 'for-life', 'none'",
	} {
		if _, err := renderChart(t, "default", values); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("values %q: render error %v, want one saying %q", values, err, why)
		}
	}
	if _, err := renderChart(t, "default", "leaderElection: none\nreplicas: 1\n"); err != nil {
		t.Errorf("one replica without election: %v", err)
	}
}

// checkChartDeployment is checkOperatorDeployment for the chart, whose pods,
// like deploy/operator's, have no fixed uid (OpenShift's restricted SCC
// assigns one; elsewhere the image's numeric user, 65532, applies).
func checkChartDeployment(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	checkOperatorDeployment(t, d)
}

// TestHelmChartCRDIsDeploys keeps the chart's CRD the generated one.
func TestHelmChartCRDIsDeploys(t *testing.T) {
	const crd = "jmx.handlerkit.dev_prometheusjmxexporters.yaml"
	want, err := os.ReadFile(filepath.Join(repo, "deploy", "crds", crd))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(repo, chartDir, "files", "crds", crd))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s/files/crds/%s differs from deploy/crds/%s: run make codegen", chartDir, crd, crd)
	}
}

// checkChartWebhook: the chart's webhook objects are the kustomize
// install's (deploy/operator's, which TestWebhookConfigurationIsFailOpenAndSelective
// checks) but for the release's names and namespace and the namespaces the
// webhook is called for: a namespaced release's exactly, a cluster-wide one's
// every namespace but the system ones and its own.
func checkChartWebhook(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment, namespace string, servedNS []string, clusterWide bool) {
	t.Helper()
	got := webhookOf(t, "the chart", objs, "prometheus-jmx-exporter-operator")
	want := webhookOf(t, namespacedInstall, build(t, namespacedInstall), "prometheus-jmx-exporter-operator")
	gw, ww := got.config.Webhooks[0], want.config.Webhooks[0]
	if gw.ClientConfig.Service == nil || gw.ClientConfig.Service.Namespace != namespace {
		t.Errorf("the chart's webhook calls %+v, want the Service in %s", gw.ClientConfig.Service, namespace)
	}
	nsSel, err := metav1.LabelSelectorAsSelector(gw.NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range append(slices.Clone(servedNS), "kube-system", "elsewhere", namespace) {
		want := slices.Contains(servedNS, ns) && ns != "kube-system"
		if clusterWide {
			want = ns != "kube-system" && ns != namespace
		}
		if got := nsSel.Matches(labels.Set{"kubernetes.io/metadata.name": ns}); got != want {
			t.Errorf("the chart's webhook is called for namespace %s: %v, want %v", ns, got, want)
		}
	}
	checkWebhookSelectors(t, "the chart", gw, d.Spec.Template.Labels, servedNS[0], clusterWide)
	gw.NamespaceSelector, ww.NamespaceSelector = nil, nil
	gw.ClientConfig.Service.Namespace, ww.ClientConfig.Service.Namespace = "", ""
	if !reflect.DeepEqual(gw, ww) {
		t.Errorf("the chart's webhook\n%+v\ndiffers from deploy/operator's\n%+v", gw, ww)
	}
	if !reflect.DeepEqual(got.service.Spec.Ports, want.service.Spec.Ports) {
		t.Errorf("the chart's webhook Service %+v, want ports %+v", got.service.Spec, want.service.Spec.Ports)
	}
	checkWebhookServiceSelector(t, "the chart", objs, got.service, d)
}
