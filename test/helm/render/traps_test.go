package render

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// renderAs renders the chart for release name with vals (YAML).
func renderAs(t *testing.T, name, vals string) []object {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(vals), &v); err != nil {
		t.Fatal(err)
	}
	docs, err := Chart(chart, name, "ops", v)
	if err != nil {
		t.Fatalf("release %s: %v", name, err)
	}
	var objs []object
	for _, d := range docs {
		var o object
		if err := yaml.Unmarshal([]byte(d), &o); err != nil {
			t.Fatalf("%v in\n%s", err, d)
		}
		objs = append(objs, o)
	}
	return objs
}

// argValue is the value of the operator's --flag=value, or "" and false.
func argValue(t *testing.T, objs []object, flag string) (string, bool) {
	t.Helper()
	for _, a := range args(t, objs) {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestExistingServiceAccountNeedsAName: serviceAccount.create=false without
// a name fails the render, rather than bind the operator's RBAC to the
// namespace's default ServiceAccount; with a name, every binding and the
// pods name it.
func TestExistingServiceAccountNeedsAName(t *testing.T) {
	if _, err := renderErr(t, "serviceAccount: {create: false}\n"); err == nil ||
		!strings.Contains(err.Error(), "serviceAccount.name") {
		t.Errorf("create=false without a name: err %v, want one asking for serviceAccount.name", err)
	}
	objs := render(t, "serviceAccount: {create: false, name: jmx-operator}\n")
	if n := kinds(objs)["ServiceAccount"]; n != 0 {
		t.Errorf("%d ServiceAccounts with create=false", n)
	}
	if sa := find(t, objs, "Deployment").get("spec", "template", "spec", "serviceAccountName"); sa != "jmx-operator" {
		t.Errorf("serviceAccountName %v, want jmx-operator", sa)
	}
	for _, o := range objs {
		if o.kind() != "RoleBinding" && o.kind() != "ClusterRoleBinding" {
			continue
		}
		for _, s := range o.get("subjects").([]any) {
			if n := s.(map[string]any)["name"]; n != "jmx-operator" {
				t.Errorf("%s %v binds %v", o.kind(), o.get("metadata", "name"), n)
			}
		}
	}
}

// TestGlobalImageRegistryMovesTheImage: global.imageRegistry is the image's
// registry when image.registry is empty; image.registry wins over it.
func TestGlobalImageRegistryMovesTheImage(t *testing.T) {
	for vals, want := range map[string]string{
		"global: {imageRegistry: localhost:5000}\n":                                                         "localhost:5000/ghcr.io/handlerkit/jmx-agent:v0.2.0",
		"global: {imageRegistry: localhost:5000/, other: x}\nimage: {repository: handlerkit/jmx-agent}\n":   "localhost:5000/handlerkit/jmx-agent:v0.2.0",
		"global: {imageRegistry: localhost:5000}\nimage: {registry: localhost, repository: handlerkit/a}\n": "localhost/handlerkit/a:v0.2.0",
	} {
		if img := container(t, render(t, vals))["image"]; img != want {
			t.Errorf("%q: image %v, want %s", vals, img, want)
		}
	}
}

// TestExtraEnvReachesTheOperator: extraEnv's variables follow the chart's
// own in the operator's container; the chart's own names are refused.
func TestExtraEnvReachesTheOperator(t *testing.T) {
	objs := render(t, "extraEnv:\n- {name: GOMEMLIMIT, value: 200MiB}\n- name: NODE\n  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}\n")
	env := container(t, objs)["env"].([]any)
	var names []string
	for _, e := range env {
		names = append(names, e.(map[string]any)["name"].(string))
	}
	if want := []string{"WATCH_NAMESPACE", "POD_NAME", "POD_NAMESPACE", "GOMEMLIMIT", "NODE"}; !reflect.DeepEqual(names, want) {
		t.Errorf("env %v, want %v", names, want)
	}
	if v := env[3].(map[string]any)["value"]; v != "200MiB" {
		t.Errorf("GOMEMLIMIT %v", v)
	}
	for _, vals := range []string{
		"extraEnv: [{name: POD_NAME, value: x}]\n",
		"extraEnv: [{name: WATCH_NAMESPACE, value: ''}]\n",
		"extraEnv: [{nme: GOMEMLIMIT}]\n",
	} {
		if _, err := renderErr(t, vals); err == nil || !strings.Contains(err.Error(), "extraEnv") {
			t.Errorf("%q: err %v, want one naming extraEnv", vals, err)
		}
	}
}

// TestLeaderLockMatchesTheAlert: for release names of 1, 17, 18, 40 and 53
// characters (Helm's longest), the operator's --leader-lock is a valid
// Lease and ConfigMap name that the HandlerkitOperatorNotLeading alert's
// matchers select (PromQL regular expressions are anchored at both ends),
// so that its absent(...) does not fire for ever; with either kind of lock.
func TestLeaderLockMatchesTheAlert(t *testing.T) {
	matcher := regexp.MustCompile(`leader_election_master_status\{name=~"([^"]*)"\}`)
	for _, n := range []int{1, 17, 18, 40, 53} {
		name := strings.Repeat("r", n)
		for _, election := range []string{"lease", "for-life"} {
			objs := renderAs(t, name, "prometheusRule: {enabled: true}\nleaderElection: "+election+"\n")
			lock, ok := argValue(t, objs, "--leader-lock")
			if !ok {
				t.Fatalf("release %s: no --leader-lock", name)
			}
			if msgs := validation.IsDNS1123Subdomain(lock); len(msgs) > 0 {
				t.Errorf("release of %d: lock %q: %v", n, lock, msgs)
			}
			var expr string
			for _, g := range find(t, objs, "PrometheusRule").get("spec", "groups").([]any) {
				for _, r := range g.(map[string]any)["rules"].([]any) {
					if r := r.(map[string]any); r["alert"] == "HandlerkitOperatorNotLeading" {
						expr = r["expr"].(string)
					}
				}
			}
			ms := matcher.FindAllStringSubmatch(expr, -1)
			if len(ms) != 2 {
				t.Fatalf("alert expr %q: %d name matchers, want 2", expr, len(ms))
			}
			for _, m := range ms {
				if !regexp.MustCompile("^(?:" + m[1] + ")$").MatchString(lock) {
					t.Errorf("release of %d characters, %s: lock %q does not match the alert's name=~%q", n, election, lock, m[1])
				}
			}
		}
	}
	// A release whose full name keeps jmx-exporter-operator keeps its lock
	// (no second leader during an upgrade).
	if lock, _ := argValue(t, renderAs(t, "jmx", ""), "--leader-lock"); lock != "jmx-prometheus-jmx-exporter-operator" {
		t.Errorf("release jmx: lock %q, want jmx-prometheus-jmx-exporter-operator", lock)
	}
}

// selectorHas reports whether the webhook's selector (namespaceSelector or
// objectSelector) holds the expression key op values.
func selectorHas(sel map[string]any, key, op string, values ...string) bool {
	for _, e := range sel["matchExpressions"].([]any) {
		e := e.(map[string]any)
		var vs []string
		for _, v := range asSlice(e["values"]) {
			vs = append(vs, v.(string))
		}
		if e["key"] == key && e["operator"] == op && slices.Equal(vs, values) {
			return true
		}
	}
	return false
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

// TestWebhookKnobs: failurePolicy, a port that moves the container port and
// --webhook-addr together (the Service's targetPort names it), and
// selectors added to the chart's own exclusions, which stay.
func TestWebhookKnobs(t *testing.T) {
	objs := render(t, "")
	hook := find(t, objs, "MutatingWebhookConfiguration").get("webhooks").([]any)[0].(map[string]any)
	if hook["failurePolicy"] != "Ignore" {
		t.Errorf("default failurePolicy %v, want Ignore", hook["failurePolicy"])
	}
	if a, _ := argValue(t, objs, "--webhook-addr"); a != ":9443" {
		t.Errorf("default --webhook-addr %q, want :9443", a)
	}

	objs = render(t, `webhook:
  failurePolicy: Fail
  port: 10443
  namespaceSelector:
    matchLabels: {team: jvm}
    matchExpressions: [{key: tier, operator: In, values: [prod]}]
  objectSelector:
    matchExpressions: [{key: app, operator: Exists}]
watchAllNamespaces: true
`)
	hook = find(t, objs, "MutatingWebhookConfiguration").get("webhooks").([]any)[0].(map[string]any)
	if hook["failurePolicy"] != "Fail" {
		t.Errorf("failurePolicy %v, want Fail", hook["failurePolicy"])
	}
	ns := hook["namespaceSelector"].(map[string]any)
	if !selectorHas(ns, "kubernetes.io/metadata.name", "NotIn", "kube-system", "kube-public", "kube-node-lease", "ops") ||
		!selectorHas(ns, "jmx.handlerkit.dev/inject", "NotIn", "false") || !selectorHas(ns, "tier", "In", "prod") ||
		!reflect.DeepEqual(ns["matchLabels"], map[string]any{"team": "jvm"}) {
		t.Errorf("namespaceSelector %v: want the chart's exclusions and the added ones", ns)
	}
	obj := hook["objectSelector"].(map[string]any)
	if !selectorHas(obj, "jmx.handlerkit.dev/inject", "NotIn", "false") ||
		!selectorHas(obj, "app.kubernetes.io/name", "NotIn", "prometheus-jmx-exporter-operator") || !selectorHas(obj, "app", "Exists") {
		t.Errorf("objectSelector %v: want the chart's exclusions and the added one", obj)
	}
	if a, _ := argValue(t, objs, "--webhook-addr"); a != ":10443" {
		t.Errorf("--webhook-addr %q, want :10443", a)
	}
	var port any
	for _, p := range container(t, objs)["ports"].([]any) {
		if p := p.(map[string]any); p["name"] == "webhook" {
			port = p["containerPort"]
		}
	}
	if port != float64(10443) {
		t.Errorf("container port webhook %v, want 10443", port)
	}
	for _, o := range objs {
		if o.kind() == "Service" {
			if tp := o.get("spec", "ports").([]any)[0].(map[string]any)["targetPort"]; tp != "webhook" {
				t.Errorf("Service targetPort %v, want the named port webhook", tp)
			}
		}
	}
	for vals, why := range map[string]string{
		"webhook: {failurePolicy: Fial}\n": "failurePolicy",
		"webhook: {port: 8383}\n":          "port",
		"webhook: {port: 70000}\n":         "port",
		"webhook: {namespaceSelector: {matchExpressions: [{key: a, operator: Within}]}}\n": "operator",
		"webhook: {objectSelector: {matchLabel: {a: b}}}\n":                                "matchLabel",
	} {
		if _, err := renderErr(t, vals); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: err %v, want one naming %s", vals, err, why)
		}
	}
}

// TestNetworkPolicyIsOptional: none by default; enabled, the webhook's port
// is open to anyone, the metrics port to metricsFrom, and egress goes to the
// API server's ports (and CIDRs), DNS and extraEgress only.
func TestNetworkPolicyIsOptional(t *testing.T) {
	if n := kinds(render(t, ""))["NetworkPolicy"]; n != 0 {
		t.Errorf("%d NetworkPolicies by default", n)
	}
	np := find(t, render(t, `networkPolicy:
  enabled: true
  metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
  apiServer: {cidrs: [10.0.0.1/32], ports: [6443]}
  extraEgress: [{ports: [{port: 443, protocol: TCP}]}]
webhook: {port: 10443}
`), "NetworkPolicy")
	want := map[string]any{
		"podSelector": map[string]any{"matchLabels": map[string]any{
			"app.kubernetes.io/name": "prometheus-jmx-exporter-operator", "app.kubernetes.io/instance": "prometheus-jmx-exporter-operator"}},
		"policyTypes": []any{"Ingress", "Egress"},
		"ingress": []any{
			map[string]any{"ports": []any{map[string]any{"protocol": "TCP", "port": float64(10443)}}},
			map[string]any{"ports": []any{map[string]any{"protocol": "TCP", "port": float64(8383)}},
				"from": []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}}},
		},
		"egress": []any{
			map[string]any{"ports": []any{map[string]any{"protocol": "TCP", "port": float64(6443)}},
				"to": []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.1/32"}}}},
			map[string]any{"ports": []any{map[string]any{"protocol": "UDP", "port": float64(53)}, map[string]any{"protocol": "TCP", "port": float64(53)}}},
			map[string]any{"ports": []any{map[string]any{"protocol": "TCP", "port": float64(443)}}},
		},
	}
	if got := np["spec"]; !reflect.DeepEqual(got, want) {
		t.Errorf("NetworkPolicy spec\n%v\nwant\n%v", got, want)
	}
	if _, err := renderErr(t, "networkPolicy: {enabled: true, apiServer: {cidrs: [kubernetes]}}\n"); err == nil ||
		!strings.Contains(err.Error(), "cidrs") {
		t.Errorf("a CIDR that is not one: err %v", err)
	}
}

// TestNotesSayTheFailurePolicyAndTheNetworkPolicy: NOTES.txt tells what
// happens to pods while the webhook is down under the chosen failurePolicy,
// and names the NetworkPolicy when there is one.
func TestNotesSayTheFailurePolicyAndTheNetworkPolicy(t *testing.T) {
	for vals, want := range map[string][]string{
		"": {"start without the agent (failurePolicy Ignore)"},
		"webhook: {failurePolicy: Fail}\nnetworkPolicy: {enabled: true}\n": {"cannot be created while it is down (failurePolicy Fail)",
			"NetworkPolicy prometheus-jmx-exporter-operator: in, the webhook's port"},
	} {
		var v map[string]any
		if err := yaml.Unmarshal([]byte(vals), &v); err != nil {
			t.Fatal(err)
		}
		notes, err := Notes(chart, "prometheus-jmx-exporter-operator", "ops", v)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(notes, w) {
				t.Errorf("%q: NOTES.txt lacks %q:\n%s", vals, w, notes)
			}
		}
		if strings.Contains(vals, "Fail") && strings.Contains(notes, "Ignore") {
			t.Errorf("%q: NOTES.txt says Ignore:\n%s", vals, notes)
		}
	}
}
