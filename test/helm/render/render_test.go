package render

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	chart = "../../../charts/prometheus-jmx-exporter-operator"
	repo  = "../../.."
)

// object is one rendered document.
type object map[string]any

func (o object) kind() string { k, _ := o["kind"].(string); return k }

func (o object) get(path ...string) any {
	var v any = map[string]any(o)
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// render renders the chart with vals (YAML) and parses every document.
func render(t *testing.T, vals string) []object {
	t.Helper()
	objs, err := renderErr(t, vals)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func renderErr(t *testing.T, vals string) ([]object, error) {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(vals), &v); err != nil {
		t.Fatal(err)
	}
	docs, err := Chart(chart, "prometheus-jmx-exporter-operator", "ops", v)
	if err != nil {
		return nil, err
	}
	var objs []object
	for _, d := range docs {
		var o object
		if err := yaml.Unmarshal([]byte(d), &o); err != nil {
			t.Fatalf("%v in\n%s", err, d)
		}
		objs = append(objs, o)
	}
	return objs, nil
}

func find(t *testing.T, objs []object, kind string) object {
	t.Helper()
	for _, o := range objs {
		if o.kind() == kind {
			return o
		}
	}
	t.Fatalf("no %s", kind)
	return nil
}

func kinds(objs []object) map[string]int {
	out := map[string]int{}
	for _, o := range objs {
		out[o.kind()]++
	}
	return out
}

// container is the operator's container of the rendered Deployment.
func container(t *testing.T, objs []object) map[string]any {
	t.Helper()
	cs := find(t, objs, "Deployment").get("spec", "template", "spec", "containers").([]any)
	return cs[0].(map[string]any)
}

func args(t *testing.T, objs []object) []string {
	var out []string
	for _, a := range container(t, objs)["args"].([]any) {
		out = append(out, a.(string))
	}
	return out
}

// TestChartRendersEveryTemplate renders the chart with its defaults: the
// CRD (a template, kept on uninstall), the served, EphemeralContainer,
// eviction (restartOnRefusal), at-start dry run, home and webhook Roles (Exec is opt-in), the
// users' view and edit ClusterRoles, the -unserved ClusterRole and its
// binding (NotServed on exporters elsewhere), the -namespaces ClusterRole
// and its binding (the namespaces' opt-out label), the webhook's ClusterRole,
// Service and configuration, and nothing that is off by default.
func TestChartRendersEveryTemplate(t *testing.T) {
	objs := render(t, "")
	want := map[string]int{"CustomResourceDefinition": 1, "ServiceAccount": 1, "Role": 6, "RoleBinding": 6, "ClusterRole": 5,
		"ClusterRoleBinding": 3, "Deployment": 1, "Service": 1, "MutatingWebhookConfiguration": 1}
	if got := kinds(objs); !reflect.DeepEqual(got, want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
	crd := find(t, objs, "CustomResourceDefinition")
	if crd.get("metadata", "annotations", "helm.sh/resource-policy") != "keep" {
		t.Errorf("CRD annotations %v, want helm.sh/resource-policy: keep", crd.get("metadata", "annotations"))
	}
	pod := find(t, objs, "Deployment").get("spec", "template", "spec").(map[string]any)
	psc := pod["securityContext"].(map[string]any)
	if _, ok := psc["runAsUser"]; ok {
		t.Errorf("pod securityContext %v: no fixed uid by default (OpenShift's restricted SCC assigns one)", psc)
	}
	if psc["runAsNonRoot"] != true || !reflect.DeepEqual(psc["seccompProfile"], map[string]any{"type": "RuntimeDefault"}) {
		t.Errorf("pod securityContext %v", psc)
	}
	sc := container(t, objs)["securityContext"].(map[string]any)
	if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false ||
		!reflect.DeepEqual(sc["capabilities"], map[string]any{"drop": []any{"ALL"}}) {
		t.Errorf("container securityContext %v", sc)
	}
	for _, a := range args(t, objs) {
		if strings.HasPrefix(a, "--pod-monitor-labels") {
			t.Errorf("arg %s without podMonitor.labels", a)
		}
	}
}

// TestChartFailsOnValuesThatCannotWork: the templates' own checks.
func TestChartFailsOnValuesThatCannotWork(t *testing.T) {
	for vals, why := range map[string]string{
		"leaderElection: none\n": "exactly one replica",
		"podDisruptionBudget: {enabled: true, minAvailable: 1, maxUnavailable: 1}\n":  "not both",
		"podMonitor: {labels: {team: 'a,b'}}\n":                                       "cannot hold",
		"webhook: {certManager: {enabled: true, issuerRef: {kind: ClusterIssuer}}}\n": "name the issuer",
	} {
		if _, err := renderErr(t, vals); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: err %v, want one saying %q", vals, err, why)
		}
	}
}

// TestSchemaRejectsAMisspeltValue: a typo at any level of a value the
// chart owns fails the render, naming the value, as `helm install` does.
func TestSchemaRejectsAMisspeltValue(t *testing.T) {
	for vals, name := range map[string]string{
		"replica: 3\n":       "replica",
		"image: {tga: v1}\n": "tga",
		"podDisruptionBudget: {enabled: true, minAvaliable: 1}\n": "minAvaliable",
		"serviceAccount: {annotation: {a: b}}\n":                  "annotation",
		"securityContext: {readOnlyRootFileSystem: true}\n":       "readOnlyRootFileSystem",
		"podSecurityContext: {runAsUsr: 1000}\n":                  "runAsUsr",
		"crds: {keeep: false}\n":                                  "keeep",
		"prometheusRule: {enable: true}\n":                        "enable",
		"leaderElection: sometimes\n":                             "leaderElection",
		"replicas: two\n":                                         "replicas",
		"podMonitor: {labels: {release: 1}}\n":                    "release",
		"webhook: {timeoutSeconds: 60}\n":                         "timeoutSeconds",
		"webhook: {atStartDelivery: ImageVolume}\n":               "atStartDelivery",
		"webhook: {atStartImageConfig: pull-secrets}\n":           "atStartImageConfig",
		"webhook: {atStartUnreadableImage: Skip}\n":               "atStartUnreadableImage",
		"webhook: {certManger: {enabled: true}}\n":                "certManger",
		"restartOnRefusal: yes please\n":                          "restartOnRefusal",
		// A key the framework's ServiceMonitor selects by: the operator
		// would refuse it at every start (exit 2), so the install does.
		"serviceMonitor: {labels: {app.kubernetes.io/name: x}}\n": "app.kubernetes.io/name",
	} {
		_, err := renderErr(t, vals)
		if err == nil || !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), name) {
			t.Errorf("%q: err %v, want a schema error naming %s", vals, err, name)
		}
	}
}

// kubernetesTypes are values that are Kubernetes objects: the schema lists
// their fields (so that a typo fails) but values.yaml sets only some.
var kubernetesTypes = []string{"podSecurityContext", "securityContext", "resources", "affinity",
	"webhook.namespaceSelector", "webhook.objectSelector"}

// leaves returns the paths of values.yaml's values: a map is entered, but
// not one the schema leaves open (a map of labels) or a Kubernetes type.
func leaves(prefix string, v any, schema map[string]any, out *[]string) {
	m, ok := v.(map[string]any)
	props, _ := schema["properties"].(map[string]any)
	if !ok || len(m) == 0 || props == nil || schema["additionalProperties"] != false ||
		slices.Contains(kubernetesTypes, strings.TrimPrefix(prefix, ".")) {
		*out = append(*out, strings.TrimPrefix(prefix, "."))
		return
	}
	for k, sub := range m {
		s, _ := props[k].(map[string]any)
		leaves(prefix+"."+k, sub, s, out)
	}
}

func readYAML(t *testing.T, file string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestEveryValueIsInTheSchemaAndSetInAllValues: each value of values.yaml
// is a property of values.schema.json (and the schema has no property
// values.yaml lacks), and testdata/all-values.yaml, which test/deploy
// applies, sets every one of them (most to something else than the default)
// and passes the schema.
func TestEveryValueIsInTheSchemaAndSetInAllValues(t *testing.T) {
	defaults := readYAML(t, filepath.Join(chart, "values.yaml"))
	data, err := os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	var paths []string
	leaves("", defaults, schema, &paths)
	sort.Strings(paths)
	all := readYAML(t, "testdata/all-values.yaml")
	for _, p := range paths {
		keys := strings.Split(p, ".")
		s := schema
		for _, k := range keys {
			props, _ := s["properties"].(map[string]any)
			s, _ = props[k].(map[string]any)
			if s == nil {
				t.Errorf("%s: not in values.schema.json", p)
				break
			}
		}
		if _, ok := lookup(all, keys); !ok {
			t.Errorf("%s: not in testdata/all-values.yaml", p)
		}
	}
	// The schema's own properties, back: none that values.yaml lacks.
	var walk func(prefix string, s map[string]any)
	walk = func(prefix string, s map[string]any) {
		props, _ := s["properties"].(map[string]any)
		if s["additionalProperties"] != false || slices.Contains(kubernetesTypes, prefix) {
			return
		}
		for k, sub := range props {
			p := strings.TrimPrefix(prefix+"."+k, ".")
			if _, ok := lookup(defaults, strings.Split(p, ".")); !ok && p != "global" {
				t.Errorf("values.schema.json has %s, values.yaml does not", p)
				continue
			}
			walk(p, sub.(map[string]any))
		}
	}
	walk("", schema)
	data, err = os.ReadFile("testdata/all-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	render(t, string(data))
	if !slices.Contains(paths, "podDisruptionBudget.minAvailable") || !slices.Contains(paths, "image.registry") {
		t.Errorf("paths %v", paths)
	}
}

// lookup finds keys in m, including keys whose value is null.
func lookup(m map[string]any, keys []string) (any, bool) {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = mm[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// TestCRDIsTheGeneratedOne: the CRD template renders deploy/crds' CRD (its
// chart copy byte for byte), plus the release's labels and, with
// crds.keep, the keep policy; crds.enabled=false renders none.
func TestCRDIsTheGeneratedOne(t *testing.T) {
	const name = "jmx.handlerkit.dev_prometheusjmxexporters.yaml"
	generated, err := os.ReadFile(filepath.Join(repo, "deploy", "crds", name))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := os.ReadFile(filepath.Join(chart, "files", "crds", name))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cp, generated) {
		t.Errorf("files/crds/%s differs from deploy/crds/%s: run make codegen", name, name)
	}
	var want object
	if err := yaml.Unmarshal(generated, &want); err != nil {
		t.Fatal(err)
	}
	crd := find(t, render(t, "crds: {keep: false}\n"), "CustomResourceDefinition")
	if !reflect.DeepEqual(crd["spec"], want["spec"]) {
		t.Error("the rendered CRD's spec differs from deploy/crds'")
	}
	if crd.get("metadata", "annotations", "helm.sh/resource-policy") != nil {
		t.Errorf("crds.keep=false: annotations %v", crd.get("metadata", "annotations"))
	}
	if crd.get("metadata", "labels", "app.kubernetes.io/managed-by") != "Helm" {
		t.Errorf("labels %v", crd.get("metadata", "labels"))
	}
	if n := kinds(render(t, "crds: {enabled: false}\n"))["CustomResourceDefinition"]; n != 0 {
		t.Errorf("crds.enabled=false: %d CRDs", n)
	}
	if _, err := os.Stat(filepath.Join(chart, "crds")); err == nil {
		t.Error("the chart has a crds/ directory: Helm would install that CRD too, outside the release, and the template's would then fail the install")
	}
}

// TestDashboardIsDeploysByteForByte: the dashboard ConfigMap's JSON is
// deploy/grafana's file, unchanged, labelled for Grafana's sidecar.
func TestDashboardIsDeploysByteForByte(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(repo, "deploy", "grafana", "prometheus-jmx-exporter.json"))
	if err != nil {
		t.Fatal(err)
	}
	cm := find(t, render(t, "dashboard: {enabled: true, labels: {team: jvm}}\n"), "ConfigMap")
	if got, _ := cm.get("data", "prometheus-jmx-exporter.json").(string); got != string(want) {
		t.Errorf("the dashboard ConfigMap's JSON (%d bytes) is not deploy/grafana/prometheus-jmx-exporter.json (%d bytes): run make chart", len(got), len(want))
	}
	if l := cm.get("metadata", "labels").(map[string]any); l["grafana_dashboard"] != "1" || l["team"] != "jvm" {
		t.Errorf("labels %v", l)
	}
}

// TestPrometheusRuleEmbedsTheRulesFile: spec.groups are the groups of
// files/prometheus-rules.yaml, with prometheusRule.labels.
func TestPrometheusRuleEmbedsTheRulesFile(t *testing.T) {
	file := readYAML(t, filepath.Join(chart, "files", "prometheus-rules.yaml"))
	groups := file["groups"]
	if groups == nil {
		groups = object(file).get("spec", "groups")
	}
	if groups == nil {
		groups = []any{}
	}
	r := find(t, render(t, "prometheusRule: {enabled: true, labels: {release: kps}}\n"), "PrometheusRule")
	if !reflect.DeepEqual(r.get("spec", "groups"), groups) {
		t.Errorf("groups %v, want the file's %v", r.get("spec", "groups"), groups)
	}
	if r.get("metadata", "labels", "release") != "kps" {
		t.Errorf("labels %v", r.get("metadata", "labels"))
	}
}

// TestMirroredImageIsTheAgentImage: a registry, repository, tag or digest
// moves the operator's image, and with it the agent image: the chart passes
// no --agent-image, so the operator takes its own pod's image (test/e2e
// TestMirroredInstallRunsTheMirroredAgentImage shows the ephemeral container
// running it).
func TestMirroredImageIsTheAgentImage(t *testing.T) {
	for vals, want := range map[string]string{
		"": "ghcr.io/handlerkit/jmx-agent:v0.2.0",
		"image: {repository: localhost/handlerkit/jmx-agent-mirror, tag: v1}\n":                                           "localhost/handlerkit/jmx-agent-mirror:v1",
		"image: {registry: localhost/, repository: handlerkit/jmx-agent-mirror}\n":                                        "localhost/handlerkit/jmx-agent-mirror:v0.2.0",
		"image: {repository: localhost/handlerkit/jmx-agent-mirror, digest: 'sha256:" + strings.Repeat("ab", 32) + "'}\n": "localhost/handlerkit/jmx-agent-mirror@sha256:" + strings.Repeat("ab", 32),
	} {
		objs := render(t, vals)
		if img := container(t, objs)["image"]; img != want {
			t.Errorf("%q: image %v, want %s", vals, img, want)
		}
		if a := args(t, objs); slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--agent-image") }) {
			t.Errorf("%q: args %v pass --agent-image, which would pin the agent apart from the operator's image", vals, a)
		}
	}
}

// TestMonitorLabelsReachTheOperator: podMonitor.labels become
// --pod-monitor-labels and serviceMonitor.labels SERVICE_MONITOR_LABELS, in
// the k=v,k=v form, sorted.
func TestMonitorLabelsReachTheOperator(t *testing.T) {
	objs := render(t, "podMonitor: {labels: {team: jvm, release: kps}}\nserviceMonitor: {labels: {release: kps}}\n")
	if a := args(t, objs); !slices.Contains(a, "--pod-monitor-labels=release=kps,team=jvm") {
		t.Errorf("args %v lack --pod-monitor-labels=release=kps,team=jvm", a)
	}
	var env []any
	env, _ = container(t, objs)["env"].([]any)
	if !slices.ContainsFunc(env, func(e any) bool {
		return reflect.DeepEqual(e, map[string]any{"name": "SERVICE_MONITOR_LABELS", "value": "release=kps"})
	}) {
		t.Errorf("env %v lacks SERVICE_MONITOR_LABELS=release=kps", env)
	}
}

// TestNotesSayWhatWasInstalled renders NOTES.txt: the served namespaces, an
// exporter to create, and what kube-prometheus-stack needs.
func TestNotesSayWhatWasInstalled(t *testing.T) {
	notes, err := Notes(chart, "jmx", "ops", map[string]any{"watchNamespaces": []any{"shop", "billing"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"shop, billing", "kind: PrometheusJmxExporter", "namespace: shop", "podMonitor.labels.release", "serviceMonitor.labels.release", "prometheusRule.enabled=true"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, notes)
		}
	}
}

// TestWebhookValuesChooseItsObjectsAndFlags: the webhook (on by default)
// renders its Service, configuration and RBAC and passes its names to the
// operator, but not --webhook=on (the operator's default, which steps aside
// when the RBAC is missing); off, none of them and --webhook=off; with cert-manager, a
// Certificate (from a self-signed Issuer, or the issuer named), the
// configuration's inject-ca-from annotation, a read-only Secret rule, no
// ClusterRole, and --webhook-external-certs=true.
func TestWebhookValuesChooseItsObjectsAndFlags(t *testing.T) {
	const full = "prometheus-jmx-exporter-operator"
	objs := render(t, "")
	if slices.ContainsFunc(args(t, objs), func(a string) bool { return strings.HasPrefix(a, "--webhook=") }) {
		t.Errorf("defaults: args %v set --webhook: on by default, the operator steps aside without its RBAC, which an explicit on would make fatal", args(t, objs))
	}
	for _, want := range []string{"--webhook-service=" + full + "-webhook", "--webhook-secret=" + full + "-webhook-tls",
		"--webhook-configuration=" + full, "--webhook-external-certs=false", "--at-start-delivery=image-volume",
		"--at-start-image-config=anonymous", "--at-start-unreadable-image=inject"} {
		if !slices.Contains(args(t, objs), want) {
			t.Errorf("defaults: args %v lack %s", args(t, objs), want)
		}
	}
	ports, _ := container(t, objs)["ports"].([]any)
	if !slices.ContainsFunc(ports, func(p any) bool {
		return reflect.DeepEqual(p, map[string]any{"name": "webhook", "containerPort": float64(9443)})
	}) {
		t.Errorf("ports %v lack webhook 9443", ports)
	}
	mwc := find(t, objs, "MutatingWebhookConfiguration")
	if mwc.get("metadata", "annotations") != nil {
		t.Errorf("the self-managed configuration has annotations %v", mwc.get("metadata", "annotations"))
	}

	off := render(t, "webhook: {enabled: false}\n")
	for _, k := range []string{"Service", "MutatingWebhookConfiguration"} {
		if kinds(off)[k] != 0 {
			t.Errorf("webhook off: %d %s", kinds(off)[k], k)
		}
	}
	for _, o := range off {
		if name, _ := o.get("metadata", "name").(string); strings.HasSuffix(name, "-webhook") {
			t.Errorf("webhook off: %s %s", o.kind(), name)
		}
	}
	if a := args(t, off); !slices.Contains(a, "--webhook=off") || slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--webhook-") }) {
		t.Errorf("webhook off: args %v", a)
	}

	for vals, issuer := range map[string]map[string]any{
		"webhook: {certManager: {enabled: true}}\n": {"name": full + "-webhook-selfsigned", "kind": "Issuer"},
		"webhook: {certManager: {enabled: true, issuerRef: {name: ca, kind: ClusterIssuer, group: cert-manager.io}}}\n": {
			"name": "ca", "kind": "ClusterIssuer", "group": "cert-manager.io"},
	} {
		cm := render(t, vals)
		if !slices.Contains(args(t, cm), "--webhook-external-certs=true") {
			t.Errorf("%q: args %v", vals, args(t, cm))
		}
		if got := find(t, cm, "MutatingWebhookConfiguration").get("metadata", "annotations", "cert-manager.io/inject-ca-from"); got != "ops/"+full+"-webhook" {
			t.Errorf("%q: inject-ca-from %v", vals, got)
		}
		cert := find(t, cm, "Certificate")
		if cert.get("spec", "secretName") != full+"-webhook-tls" || !reflect.DeepEqual(cert.get("spec", "issuerRef"), issuer) ||
			!reflect.DeepEqual(cert.get("spec", "dnsNames"), []any{full + "-webhook.ops.svc", full + "-webhook.ops.svc.cluster.local"}) {
			t.Errorf("%q: Certificate %v", vals, cert)
		}
		if n := kinds(cm)["Issuer"]; (n == 1) != (issuer["kind"] == "Issuer") {
			t.Errorf("%q: %d Issuers", vals, n)
		}
		for _, o := range cm {
			name, _ := o.get("metadata", "name").(string)
			switch {
			case o.kind() == "ClusterRole" && name == full+"-webhook":
				t.Errorf("%q: the ClusterRole for the caBundle, which cert-manager keeps", vals)
			case o.kind() == "Role" && name == full+"-webhook":
				want := []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"},
					"resourceNames": []any{full + "-webhook-tls"}, "verbs": []any{"get", "list", "watch"}}}
				if !reflect.DeepEqual(o.get("rules"), want) {
					t.Errorf("%q: webhook Role rules %v, want read-only %v", vals, o.get("rules"), want)
				}
			}
		}
	}
}

// TestOnlyTheOperatorsPodsCarryTheWebhookServerLabel: the webhook Service
// selects jmx.handlerkit.dev/webhook-server=true beside the chart's selector
// labels, the operator's pod template carries it, podLabels cannot replace
// it, and the Deployment's selector (immutable) does not name it.
func TestOnlyTheOperatorsPodsCarryTheWebhookServerLabel(t *testing.T) {
	const label = "jmx.handlerkit.dev/webhook-server"
	objs := render(t, "podLabels: {"+label+": \"false\", team: jvm}\n")
	var svc object
	for _, o := range objs {
		if name, _ := o.get("metadata", "name").(string); o.kind() == "Service" && strings.HasSuffix(name, "-webhook") {
			svc = o
		}
	}
	if svc == nil {
		t.Fatal("no webhook Service")
	}
	d := find(t, objs, "Deployment")
	selector, _ := svc.get("spec", "selector").(map[string]any)
	podLabels, _ := d.get("spec", "template", "metadata", "labels").(map[string]any)
	matchLabels, _ := d.get("spec", "selector", "matchLabels").(map[string]any)
	if selector[label] != "true" || podLabels[label] != "true" || podLabels["team"] != "jvm" {
		t.Errorf("Service selector %v, pod labels %v: want %s=true in both (podLabels cannot replace it)", selector, podLabels, label)
	}
	for k, v := range matchLabels {
		if selector[k] != v {
			t.Errorf("Service selector %v lacks the Deployment's selector label %s=%v", selector, k, v)
		}
	}
	if _, ok := matchLabels[label]; ok {
		t.Errorf("the Deployment's selector %v names %s: it is immutable", matchLabels, label)
	}
}
