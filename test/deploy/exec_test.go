package deploy

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/handlerkit/handlerkit/internal/testbuild"
	"github.com/handlerkit/handlerkit/pkg/webhook"
)

// downwardEnv are the operator's environment variables from the downward
// API, the same in every install; any other is a setting.
var downwardEnv = []string{"WATCH_NAMESPACE", "POD_NAME", "POD_NAMESPACE"}

// settings are the operator's settings in a kustomization: the environment
// variables of its Deployment's container other than downwardEnv, nil when
// it has none. They are the Deployment's alone: a kustomization that reads
// settings from elsewhere (envFrom, a ConfigMap anyone who may write
// ConfigMaps in the namespace could create) fails the test.
func settings(t testing.TB, dir string) map[string]string {
	t.Helper()
	for _, o := range build(t, dir) {
		if o.GetKind() == "ConfigMap" {
			t.Errorf("%s holds ConfigMap %s: the operator's settings are its Deployment's", dir, o.GetName())
		}
	}
	c := deployment(t, dir).Spec.Template.Spec.Containers[0]
	if len(c.EnvFrom) > 0 {
		t.Errorf("%s: envFrom %+v: the operator's settings are its Deployment's, not a ConfigMap's or Secret's", dir, c.EnvFrom)
	}
	var out map[string]string
	for _, e := range c.Env {
		if slices.Contains(downwardEnv, e.Name) {
			continue
		}
		if e.ValueFrom != nil {
			t.Errorf("%s: env %s from %+v: the operator's settings are its Deployment's", dir, e.Name, e.ValueFrom)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[e.Name] = e.Value
	}
	return out
}

// grantsPodsExec returns the rules of every Role and ClusterRole in objs
// that allow create on pods/exec (or a wildcard that covers it).
func grantsPodsExec(t testing.TB, objs []*unstructured.Unstructured) []string {
	t.Helper()
	var out []string
	for _, o := range objs {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		var r rbacv1.Role
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
			t.Fatal(err)
		}
		for _, rule := range r.Rules {
			if (slices.Contains(rule.APIGroups, "") || slices.Contains(rule.APIGroups, "*")) &&
				(slices.Contains(rule.Resources, "pods/exec") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.Resources, "pods/*")) &&
				(slices.Contains(rule.Verbs, "create") || slices.Contains(rule.Verbs, "*")) {
				out = append(out, o.GetKind()+" "+o.GetName())
			}
		}
	}
	return out
}

// TestExecIsOptIn: the default installs (deploy/operator, its cluster-wide
// flavour, and everything built on them) grant no pods/exec anywhere and do
// not switch Exec on; the Exec opt-in (deploy/overlays/exec,
// deploy/overlays/cluster-wide-exec) is the default install plus exactly the
// -exec Role and the setting STRATEGIES=EphemeralContainer,Exec in its
// Deployment (no settings ConfigMap: docs/install.md). The API
// server's authorizer then denies the default install's ServiceAccount
// create pods/exec, in the namespace it serves and at home, allows it
// everything else it does, and allows the opt-in's pods/exec.
func TestExecIsOptIn(t *testing.T) {
	for _, dir := range []string{"deploy", namespacedInstall, clusterWideInstall, "deploy/overlays/local"} {
		if got := grantsPodsExec(t, build(t, dir)); len(got) > 0 {
			t.Errorf("%s grants create pods/exec: %v", dir, got)
		}
		if s := settings(t, dir); s != nil {
			t.Errorf("%s has settings %v, want none (the operator's defaults)", dir, s)
		}
		checkStrategiesFromSettings(t, dir)
	}
	for def, opt := range map[string]string{namespacedInstall: namespacedExec, clusterWideInstall: clusterWideExec} {
		kind := "Role"
		if def == clusterWideInstall {
			kind = "ClusterRole"
		}
		if got := grantsPodsExec(t, build(t, opt)); !slices.Equal(got, []string{kind + " prometheus-jmx-exporter-operator-exec"}) {
			t.Errorf("%s: pods/exec granted by %v, want the -exec %s alone", opt, got, kind)
		}
		want := map[string]string{"STRATEGIES": "EphemeralContainer,Exec"}
		if got := settings(t, opt); !reflect.DeepEqual(got, want) {
			t.Errorf("%s settings %v, want %v", opt, got, want)
		}
		checkStrategiesFromSettings(t, opt)
		optDep := deployment(t, opt)
		c := &optDep.Spec.Template.Spec.Containers[0]
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "STRATEGIES" })
		if !reflect.DeepEqual(deployment(t, def), optDep) {
			t.Errorf("%s changes the Deployment of %s in more than STRATEGIES", opt, def)
		}
		defRoles, optRoles := roles(t, def, kind), roles(t, opt, kind)
		delete(optRoles, "prometheus-jmx-exporter-operator-exec")
		if !reflect.DeepEqual(defRoles, optRoles) {
			t.Errorf("%s's %ss less -exec differ from %s's", opt, kind, def)
		}
	}

	env := cluster.Get(t)
	kube := env.Clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var l layout
	for _, p := range []*string{&l.home, &l.served} {
		ns, err := env.CreateNamespace(ctx, "optin")
		if err != nil {
			t.Fatal(err)
		}
		*p = ns
	}
	if err := bind(ctx, kube, l, "default-install", "-default", roles(t, namespacedInstall, "Role")); err != nil {
		t.Fatal(err)
	}
	if err := bind(ctx, kube, l, "exec-install", "-exec", roles(t, namespacedExec, "Role")); err != nil {
		t.Fatal(err)
	}
	if err := waitCaughtUp(ctx, kube, l, "test-sentinel"); err != nil {
		t.Fatal(err)
	}
	for _, r := range denied(ctx, t, kube, l, l.user("default-install"), defaultRequests()) {
		t.Errorf("the default install denies %s", r)
	}
	for _, s := range []scope{served, home} {
		if ok, err := allowed(ctx, kube, l.user("default-install"), l.ns(s), execRequest); err != nil || ok {
			t.Errorf("the default install allows create pods/exec in the %s namespace (%v)", s, err)
		}
	}
	if ok, err := allowed(ctx, kube, l.user("exec-install"), l.served, execRequest); err != nil || !ok {
		t.Errorf("the Exec opt-in does not allow %s (%v)", execRequest, err)
	}
	if ok, err := allowed(ctx, kube, l.user("exec-install"), l.home, execRequest); err != nil || ok {
		t.Errorf("the Exec opt-in allows create pods/exec in the operator's own namespace, which it does not serve (%v)", err)
	}
}

// checkStrategiesFromSettings: the operator's strategies come only from its
// settings (settings: the Deployment's env) or its default, never from an
// argument that would hide them.
func checkStrategiesFromSettings(t *testing.T, dir string) {
	t.Helper()
	c := deployment(t, dir).Spec.Template.Spec.Containers[0]
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--strategies") || strings.HasPrefix(a, "-strategies") {
			t.Errorf("%s: arg %s hides the settings' STRATEGIES", dir, a)
		}
	}
}

// TestOperatorDefaultsAreTheDefaultInstalls builds the operator and reads
// its flags' defaults from -help: without settings it enables the
// EphemeralContainer strategy only, which is what the default installs grant
// (TestExecIsOptIn), and it has the flags the chart passes.
func TestOperatorDefaultsAreTheDefaultInstalls(t *testing.T) {
	bins, err := testbuild.Build(t.Context(), repo, t.TempDir(), testbuild.ReleaseFlags, testbuild.ReleaseEnv,
		"./cmd/prometheus-jmx-exporter-operator")
	if err != nil {
		t.Fatal(err)
	}
	bin := bins[0]
	cmd := exec.Command(bin, "-help")
	// Only the defaults: no setting from this process's environment.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "STRATEGIES=") || strings.HasPrefix(kv, "ALLOWED_AGENT_IMAGES=")
	})
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("-help: %v\n%s", err, out.String())
	}
	help := out.String()
	m := regexp.MustCompile(`(?s)\n\s+-strategies string\n[^\n]*\(default "([^"]*)"\)`).FindStringSubmatch(help)
	if m == nil {
		t.Fatalf("-help shows no default for -strategies:\n%s", help)
	}
	if m[1] != "EphemeralContainer" {
		t.Errorf("-strategies defaults to %q; the default installs grant EphemeralContainer only", m[1])
	}
	// The chart's deployment.yaml passes these.
	for _, f := range []string{"strategies", "default-strategy", "agent-image", "allowed-agent-images", "pod-monitors",
		"metrics-service", "leader-election", "leader-lock", "log-format", "webhook", "webhook-service", "webhook-secret",
		"webhook-configuration", "webhook-external-certs", "webhook-addr", "at-start-delivery", "at-start-image-config", "at-start-unreadable-image"} {
		if !strings.Contains(help, "\n  -"+f+" ") && !strings.Contains(help, "\n  -"+f+"\n") {
			t.Errorf("the operator has no flag -%s, which the chart passes", f)
		}
	}
	// The manifests run the webhook with the operator's defaults: their
	// names are these (webhook_test.go).
	_, port, _ := net.SplitHostPort(webhook.DefaultAddr)
	for flag, want := range map[string]string{"webhook": "on", "webhook-service": webhookService, "webhook-secret": webhookSecret,
		"webhook-configuration": webhookConfig, "webhook-addr": ":" + port, "at-start-delivery": "image-volume",
		"at-start-image-config": "anonymous", "at-start-unreadable-image": "inject"} {
		m := regexp.MustCompile(`(?s)\n\s+-` + flag + ` string\n[^\n]*\(default "([^"]*)"\)`).FindStringSubmatch(help)
		if m == nil || m[1] != want {
			t.Errorf("-%s defaults to %v, the manifests need %q", flag, m, want)
		}
	}
}
