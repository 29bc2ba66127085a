package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/handlerkit/handlerkit/internal/manifest"
	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// runAggregation runs kube-controller-manager's clusterrole-aggregation
// controller against env until t ends, unless env runs a controller-manager
// of its own (cluster mode) or is an existing cluster (which has one): the
// control plane of this package has none, and without it the built-in view,
// edit and admin ClusterRoles never receive the rules aggregated into them.
func runAggregation(t *testing.T, ctx context.Context, env *testenv.Environment) {
	t.Helper()
	runControllers(t, ctx, env, "clusterrole-aggregation")
}

// runControllers runs kube-controller-manager with only controllers (its
// --controllers names) against env until t ends, unless env runs a
// controller-manager of its own or is an existing cluster.
func runControllers(t *testing.T, ctx context.Context, env *testenv.Environment, controllers string) {
	t.Helper()
	procs := env.Processes()
	if !slices.ContainsFunc(procs, func(p *testenv.Process) bool { return p.Name == "kube-apiserver" }) ||
		slices.ContainsFunc(procs, func(p *testenv.Process) bool { return p.Name == "kube-controller-manager" }) {
		return
	}
	bin, err := testenv.Binary(ctx, "kube-controller-manager")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := env.KubeconfigFile()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "kube-controller-manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--controllers="+controllers,
		"--leader-elect=false", "--secure-port=0", "--profiling=false", "-v=1")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logFile.Close()
		if t.Failed() {
			if out, err := os.ReadFile(logPath); err == nil {
				t.Logf("kube-controller-manager log:\n%s", out)
			}
		}
	})
}

// TestAggregatedRolesGiveNamespaceUsersExporters applies
// deploy/operator/user-roles (the chart's are the same,
// TestHelmChartRendersTheProvenRBACAndAppliesToTheAPIServer) with the
// controller that aggregates ClusterRoles running, binds users to the
// built-in ClusterRoles in one namespace and makes their requests for real:
// edit creates, changes and deletes exporters there, and nowhere else, and
// never writes their status; view reads them and their status and writes
// nothing; admin has what edit has. Neither role gives anything on pods.
func TestAggregatedRolesGiveNamespaceUsersExporters(t *testing.T) {
	env := cluster.Get(t)
	kube := env.Clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	objs := build(t, "deploy/operator/user-roles")
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" {
			t.Fatalf("deploy/operator/user-roles holds %s %s", o.GetKind(), o.GetName())
		}
		var cr rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &cr); err != nil {
			t.Fatal(err)
		}
		for _, r := range cr.Rules {
			if !slices.Equal(r.APIGroups, []string{jmxGroup}) || slices.ContainsFunc(r.Resources, func(res string) bool {
				return res != exporters && res != exporters+"/status"
			}) {
				t.Errorf("%s: rule %+v grants more than exporters", o.GetName(), r)
			}
			if slices.Contains(r.Resources, exporters+"/status") && !slices.Equal(r.Verbs, []string{"get"}) {
				t.Errorf("%s: status verbs %v, want get only", o.GetName(), r.Verbs)
			}
		}
	}
	a, err := manifest.NewApplier(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Apply(ctx, "", objs...); err != nil {
		t.Fatal(err)
	}
	if _, err := env.InstallCRDsFromDir(ctx, filepath.Join(repo, "deploy", "crds")); err != nil {
		t.Fatal(err)
	}
	runAggregation(t, ctx, env)

	var mine, other string
	for _, p := range []*string{&mine, &other} {
		ns, err := env.CreateNamespace(ctx, "users")
		if err != nil {
			t.Fatal(err)
		}
		*p = ns
	}
	users := map[string]string{"alice": "edit", "bob": "view", "carol": "admin"}
	for user, role := range users {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
		if _, err := kube.RbacV1().RoleBindings(mine).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ask := func(user, ns, verb, sub string) bool {
		t.Helper()
		ok, err := allowed(ctx, kube, user, ns, request{verb: verb, group: jmxGroup, resource: exporters, subresource: sub})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// Until the controller has aggregated the roles into edit, view and admin.
	for !ask("alice", mine, "create", "") || !ask("bob", mine, "get", "") || !ask("carol", mine, "create", "") {
		select {
		case <-ctx.Done():
			t.Fatalf("the built-in ClusterRoles never received the exporters' rules: %v", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}

	client := func(user string) versioned.Interface {
		cfg, err := env.ConfigForUser(user)
		if err != nil {
			t.Fatal(err)
		}
		c, err := versioned.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alice, bob := client("alice"), client("bob")
	exporter := func(name string) *jmxv1alpha1.PrometheusJmxExporter {
		return &jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: jmxv1alpha1.PrometheusJmxExporterSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}}}
	}
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", what, err)
		}
	}

	// edit, in its namespace: create, read, update, patch, delete.
	ex, err := alice.JmxV1alpha1().PrometheusJmxExporters(mine).Create(ctx, exporter("orders"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("edit cannot create an exporter in its namespace: %v", err)
	}
	ex.Spec.Selector.MatchLabels["tier"] = "backend"
	if ex, err = alice.JmxV1alpha1().PrometheusJmxExporters(mine).Update(ctx, ex, metav1.UpdateOptions{}); err != nil {
		t.Errorf("edit cannot update its exporter: %v", err)
	}
	if _, err := alice.JmxV1alpha1().PrometheusJmxExporters(mine).Patch(ctx, "orders", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"team":"shop"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("edit cannot patch its exporter: %v", err)
	}
	// ... but not its status, which only the operator writes.
	ex, err = alice.JmxV1alpha1().PrometheusJmxExporters(mine).Get(ctx, "orders", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ex.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Forged",
		LastTransitionTime: metav1.Now()}}
	_, err = alice.JmxV1alpha1().PrometheusJmxExporters(mine).UpdateStatus(ctx, ex, metav1.UpdateOptions{})
	forbidden("edit updating an exporter's status", err)
	_, err = alice.JmxV1alpha1().PrometheusJmxExporters(mine).Patch(ctx, "orders", types.MergePatchType,
		[]byte(`{"status":{"observedGeneration":7}}`), metav1.PatchOptions{}, "status")
	forbidden("edit patching an exporter's status", err)
	// ... and nothing in another namespace.
	_, err = alice.JmxV1alpha1().PrometheusJmxExporters(other).Create(ctx, exporter("elsewhere"), metav1.CreateOptions{})
	forbidden("edit creating an exporter in another namespace", err)
	_, err = alice.JmxV1alpha1().PrometheusJmxExporters(other).List(ctx, metav1.ListOptions{})
	forbidden("edit listing another namespace's exporters", err)

	// view: reads exporters and their status, writes nothing.
	if list, err := bob.JmxV1alpha1().PrometheusJmxExporters(mine).List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 1 {
		t.Errorf("view cannot list the namespace's exporters: %v", err)
	}
	if _, err := bob.JmxV1alpha1().PrometheusJmxExporters(mine).Get(ctx, "orders", metav1.GetOptions{}); err != nil {
		t.Errorf("view cannot get an exporter: %v", err)
	}
	if !ask("bob", mine, "get", "status") || !ask("bob", mine, "watch", "") {
		t.Error("view cannot get an exporter's status or watch exporters")
	}
	_, err = bob.JmxV1alpha1().PrometheusJmxExporters(mine).Create(ctx, exporter("billing"), metav1.CreateOptions{})
	forbidden("view creating an exporter", err)
	err = bob.JmxV1alpha1().PrometheusJmxExporters(mine).Delete(ctx, "orders", metav1.DeleteOptions{})
	forbidden("view deleting an exporter", err)
	_, err = bob.JmxV1alpha1().PrometheusJmxExporters(other).List(ctx, metav1.ListOptions{})
	forbidden("view listing another namespace's exporters", err)

	// What each built-in role holds, asked of the authorizer.
	for _, c := range []struct {
		user, ns, verb, sub string
		want                bool
	}{
		{"alice", mine, "deletecollection", "", true},
		{"alice", mine, "watch", "", true},
		{"alice", mine, "update", "status", false},
		{"alice", other, "get", "", false},
		{"bob", mine, "update", "", false},
		{"bob", mine, "patch", "", false},
		{"bob", mine, "update", "status", false},
		{"carol", mine, "delete", "", true},
		{"carol", mine, "update", "status", false},
		{"carol", other, "create", "", false},
	} {
		if got := ask(c.user, c.ns, c.verb, c.sub); got != c.want {
			t.Errorf("%s (%s) %s %s/%s in %s: allowed %v, want %v", c.user, users[c.user], c.verb, exporters, c.sub, c.ns, got, c.want)
		}
	}

	if err := alice.JmxV1alpha1().PrometheusJmxExporters(mine).Delete(ctx, "orders", metav1.DeleteOptions{}); err != nil {
		t.Errorf("edit cannot delete its exporter: %v", err)
	}
}
