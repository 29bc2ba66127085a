package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/handlerkit/handlerkit/internal/manifest"
	"github.com/handlerkit/handlerkit/pkg/testenv"
	"github.com/handlerkit/handlerkit/pkg/webhook"
)

// createNamespaces creates namespaces, leaving those that exist.
func createNamespaces(ctx context.Context, t *testing.T, env *testenv.Environment, names ...string) {
	t.Helper()
	for _, ns := range names {
		_, err := env.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// prometheusRuleCRD is Prometheus Operator's PrometheusRule CRD as the
// module test/monitoring requires ships it (example/prometheus-operator-crd).
func prometheusRuleCRD(ctx context.Context, t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "github.com/prometheus-operator/prometheus-operator")
	cmd.Dir = filepath.Join(repo, "test", "monitoring")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download in test/monitoring: %v", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download: %v: %s", err, out)
	}
	crds, err := testenv.ReadCRDs(filepath.Join(mod.Dir, "example", "prometheus-operator-crd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range crds {
		if c.Name == "prometheusrules.monitoring.coreos.com" {
			return c
		}
	}
	t.Fatal("prometheus-operator ships no PrometheusRule CRD")
	return nil
}

// TestHelmChartWithEveryValueAppliesToTheAPIServer renders the chart with
// test/helm's testdata/all-values.yaml, which sets every value of the chart
// (test/helm checks that it does), and applies each object to the API
// server, with a server-side dry run and then for real: the PodDisruptionBudget,
// the PrometheusRule (with Prometheus Operator's own CRD), the dashboard
// ConfigMap, scheduling, pod metadata, security contexts and the named
// ServiceAccount are all accepted. The RBAC is still deploy/'s, bound to the
// named ServiceAccount; the mirrored image is the agent image.
func TestHelmChartWithEveryValueAppliesToTheAPIServer(t *testing.T) {
	env := cluster.Get(t)
	waitForHelmCommands(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	createNamespaces(ctx, t, env, "helm-every", "helm-every-b")
	if err := env.InstallCRDs(ctx, prometheusRuleCRD(ctx, t)); err != nil {
		t.Fatal(err)
	}
	values, err := os.ReadFile(filepath.Join(repo, "test", "helm", "render", "testdata", "all-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := renderChart(t, "helm-every", string(values))
	if err != nil {
		t.Fatal(err)
	}
	const op, sa = "prometheus-jmx-exporter-operator", "jmx-operator"
	deployRoles := roles(t, namespacedExec, "Role")
	want := map[string][]rbacv1.PolicyRule{}
	for _, ns := range []string{"helm-every", "helm-every-b"} {
		want[ns+"/"+op] = deployRoles[op].Rules
		want[ns+"/"+op+"-ephemeralcontainer"] = deployRoles[op+"-ephemeralcontainer"].Rules
		want[ns+"/"+op+"-exec"] = deployRoles[op+"-exec"].Rules
		want[ns+"/"+op+"-atstart"] = deployRoles[op+"-atstart"].Rules
	}
	// for-life election: the lock ConfigMap instead of the Lease.
	want["helm-every/"+op+"-home"] = withoutRules(deployRoles[op+"-home"].Rules, "leases")
	// cert-manager writes the webhook's Secret: the operator only reads it,
	// and has no ClusterRole for the caBundle. No restartOnRefusal: no
	// eviction rule.
	want["helm-every/"+op+"-webhook"] = webhook.PolicyRules(op+"-webhook-tls", true)
	if cr := rulesOf(t, objs, "ClusterRole")[op+"-webhook"]; cr != nil {
		t.Errorf("a webhook ClusterRole %v with cert-manager", cr)
	}
	home := rulesOf(t, objs, "Role")["helm-every/"+op+"-home"]
	if !slices.ContainsFunc(home, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "configmaps") }) {
		t.Errorf("for-life: the home Role %v lacks the lock ConfigMap", home)
	}
	got := rulesOf(t, objs, "Role")
	got["helm-every/"+op+"-home"] = withoutRules(home, "configmaps")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Roles\n%v\nwant\n%v", got, want)
	}
	bindings := 0
	for _, o := range objs {
		if o.GetKind() != "RoleBinding" && o.GetKind() != "ClusterRoleBinding" {
			continue
		}
		bindings++
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		if len(subjects) != 1 || subjects[0].(map[string]any)["name"] != sa || subjects[0].(map[string]any)["namespace"] != "helm-every" {
			t.Errorf("%s %s/%s subjects %v, want the ServiceAccount helm-every/%s", o.GetKind(), o.GetNamespace(), o.GetName(), subjects, sa)
		}
	}
	if bindings == 0 {
		t.Error("no bindings")
	}
	d := deploymentOf(t, objs)
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	const mirrored = "localhost/handlerkit/jmx-agent-mirror:v1"
	// The operator reads its own image from its pod and uses it as the agent
	// image, so the chart passes no --agent-image.
	if c.Image != mirrored || slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--agent-image") }) {
		t.Errorf("image %s, args %v: want %s and no --agent-image", c.Image, c.Args, mirrored)
	}
	if pod.ServiceAccountName != sa || pod.PriorityClassName != "system-cluster-critical" || len(pod.Tolerations) != 1 ||
		pod.Affinity == nil || len(pod.TopologySpreadConstraints) != 1 || pod.TopologySpreadConstraints[0].LabelSelector == nil ||
		len(pod.ImagePullSecrets) != 1 || pod.NodeSelector["kubernetes.io/os"] != "linux" ||
		d.Spec.Template.Labels["team"] != "jvm" || d.Spec.Template.Annotations["example.com/scraped"] != "yes" {
		t.Errorf("pod template %+v", d.Spec.Template)
	}
	for _, kind := range []string{"PodDisruptionBudget", "PrometheusRule", "ConfigMap", "ServiceAccount", "CustomResourceDefinition",
		"Service", "MutatingWebhookConfiguration", "Certificate"} {
		if !slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == kind }) {
			t.Errorf("no %s", kind)
		}
	}

	// cert-manager's objects are checked by test/helm; this API server does
	// not serve their kinds.
	objs = slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool {
		return o.GroupVersionKind().Group == "cert-manager.io"
	})
	a, err := manifest.NewApplier(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(objs, func(x, y *unstructured.Unstructured) int {
		return slices.Index(kindOrder, x.GetKind()) - slices.Index(kindOrder, y.GetKind())
	})
	if err := a.DryRun(ctx, "helm-every", objs...); err != nil {
		t.Fatalf("server-side dry run: %v", err)
	}
	if err := a.Apply(ctx, "helm-every", objs...); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if left, err := a.Missing(ctx, "helm-every", objs...); err != nil || len(left) != 0 {
		t.Fatalf("after apply %d objects are missing (%v)", len(left), err)
	}
}

// helm runs test/helm's helm-release (the Helm library's install, upgrade
// and uninstall actions) against env's API server.
func helm(t *testing.T, env *testenv.Environment, args ...string) string {
	t.Helper()
	release := helmRelease.built(t)
	kubeconfig, err := env.KubeconfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(release, append([]string{"-kubeconfig", kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm-release %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// testGroup is the API group of the upgrade test's copy of the CRD, so that
// its release owns a CRD no other test applies.
const testGroup = "helmupgrade.handlerkit.dev"

// chartWithCRD copies the chart into a new directory with its CRD moved to
// testGroup and, when field is not empty, a new string field spec.<field>.
func chartWithCRD(t *testing.T, field string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "chart")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(repo, chartDir))); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "files", "crds", "jmx.handlerkit.dev_prometheusjmxexporters.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	crd.Spec.Group = testGroup
	crd.Name = crd.Spec.Names.Plural + "." + testGroup
	if field != "" {
		for i := range crd.Spec.Versions {
			spec := crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"]
			spec.Properties[field] = apiextensionsv1.JSONSchemaProps{Type: "string", Description: "A field of the upgraded chart."}
			crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		}
	}
	out, err := yaml.Marshal(&crd)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestHelmUpgradeServesTheCRDsNewField installs the chart with the Helm
// library's install action, upgrades it with its upgrade action to a chart
// whose CRD has a new field, and shows that the API server then keeps that
// field (before the upgrade it prunes it): Helm upgrades the CRD, which it
// never does for one in crds/. Uninstalling leaves the CRD, and the
// exporter, in place (crds.keep). The chart's CRD is moved to a group of its
// own so that no other test's CRD is involved.
func TestHelmUpgradeServesTheCRDsNewField(t *testing.T) {
	env := cluster.Get(t)
	waitForHelmCommands(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ns, release, field = "helm-upgrade", "upgrade", "upgradeProbe"
	createNamespaces(ctx, t, env, ns)
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte("aggregatedRoles: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	crdName := "prometheusjmxexporters." + testGroup
	crds := dyn.Resource(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"))
	exporters := dyn.Resource(schema.GroupVersionResource{Group: testGroup, Version: "v1alpha1", Resource: "prometheusjmxexporters"}).Namespace(ns)
	// write creates or replaces the exporter with spec.<field> set and
	// returns what the API server stored.
	write := func() *unstructured.Unstructured {
		t.Helper()
		ex := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": testGroup + "/v1alpha1", "kind": "PrometheusJmxExporter",
			"metadata": map[string]any{"name": "orders"},
			"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "orders"}},
				"config": map[string]any{"configMapName": "orders-jmx-exporter"}, "port": int64(9404), field: "kept"},
		}}
		var stored *unstructured.Unstructured
		// The CRD's new schema reaches the API server's handlers a moment after it is stored.
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_ = exporters.Delete(ctx, "orders", metav1.DeleteOptions{})
			var err error
			stored, err = exporters.Create(ctx, ex, metav1.CreateOptions{})
			if apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) {
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return stored
	}

	out := helm(t, env, "-chart", chartWithCRD(t, ""), "-namespace", ns, "-name", release, "-values", values, "install")
	if !strings.Contains(out, "revision 1 deployed") || !strings.Contains(out, "Namespaces served:") {
		t.Errorf("install printed\n%s", out)
	}
	crd, err := crds.Get(ctx, crdName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the install did not create the CRD: %v", err)
	}
	if a := crd.GetAnnotations(); a["helm.sh/resource-policy"] != "keep" || a["meta.helm.sh/release-name"] != release {
		t.Errorf("CRD annotations %v: want the release's, and keep", a)
	}
	if _, found, _ := unstructured.NestedString(write().Object, "spec", field); found {
		t.Fatalf("before the upgrade the API server kept spec.%s, which the CRD does not have", field)
	}

	out = helm(t, env, "-chart", chartWithCRD(t, field), "-namespace", ns, "-name", release, "-values", values, "upgrade")
	if !strings.Contains(out, "revision 2 deployed") {
		t.Errorf("upgrade printed\n%s", out)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		v, found, _ := unstructured.NestedString(write().Object, "spec", field)
		return found && v == "kept", nil
	})
	if err != nil {
		t.Fatalf("after the upgrade the API server still prunes spec.%s: Helm did not upgrade the CRD", field)
	}

	helm(t, env, "-namespace", ns, "-name", release, "uninstall")
	if _, err := crds.Get(ctx, crdName, metav1.GetOptions{}); err != nil {
		t.Errorf("after helm uninstall the CRD is gone (crds.keep): %v", err)
	}
	if _, err := exporters.Get(ctx, "orders", metav1.GetOptions{}); err != nil {
		t.Errorf("after helm uninstall the exporter is gone: %v", err)
	}
}
