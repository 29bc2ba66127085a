package v1alpha1_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
)

const crdName = "prometheusjmxexporters.jmx.handlerkit.dev"

func clientset(t *testing.T) versioned.Interface {
	t.Helper()
	cs, err := versioned.NewForConfig(cluster(t).Config())
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	return cs
}

func minimalExporter(name string) *jmxv1alpha1.PrometheusJmxExporter {
	return &jmxv1alpha1.PrometheusJmxExporter{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": "payments"}},
		Spec: jmxv1alpha1.PrometheusJmxExporterSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "orders"}},
		},
	}
}

func TestCRDInstallsAndIsEstablished(t *testing.T) {
	env := cluster(t)
	if len(clusterCRDs) != 1 || clusterCRDs[0].Name != crdName {
		var names []string
		for _, c := range clusterCRDs {
			names = append(names, c.Name)
		}
		t.Fatalf("deploy/crds installed %v, want exactly [%s]", names, crdName)
	}
	client, err := apiextensionsclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), crdName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get CRD: %v", err)
	}
	established := false
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			established = true
		}
	}
	if !established {
		t.Errorf("CRD conditions %+v lack Established=True", crd.Status.Conditions)
	}
	if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Errorf("scope = %s, want Namespaced", crd.Spec.Scope)
	}
	if !slices.Equal(crd.Status.AcceptedNames.ShortNames, []string{"pje"}) {
		t.Errorf("accepted short names = %v, want [pje]", crd.Status.AcceptedNames.ShortNames)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v1alpha1" {
		t.Fatalf("versions = %+v, want only v1alpha1", crd.Spec.Versions)
	}
	version := crd.Spec.Versions[0]
	if version.Subresources == nil || version.Subresources.Status == nil {
		t.Error("v1alpha1 has no status subresource")
	}
	var columns []string
	for _, c := range version.AdditionalPrinterColumns {
		columns = append(columns, c.Name)
	}
	if want := []string{"Port", "Matched", "Injected", "Failed", "Ready", "Age"}; !slices.Equal(columns, want) {
		t.Errorf("printer columns = %v, want %v", columns, want)
	}
}

// readExample returns the PrometheusJmxExporter of the example manifest that
// the docs show, decoded strictly so that a field the API lacks fails here.
func readExample(t *testing.T) *jmxv1alpha1.PrometheusJmxExporter {
	t.Helper()
	data, err := os.ReadFile(repoPath(t, "deploy/crds/jmx.handlerkit.dev_v1alpha1_prometheusjmxexporter_cr.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading example: %v", err)
		}
		var meta metav1.TypeMeta
		if err := utilyaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("example document: %v", err)
		}
		if meta.Kind != "PrometheusJmxExporter" {
			continue
		}
		jsonDoc, err := utilyaml.ToJSON(doc)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(jsonDoc))
		dec.DisallowUnknownFields()
		var out jmxv1alpha1.PrometheusJmxExporter
		if err := dec.Decode(&out); err != nil {
			t.Fatalf("example does not match the Go types: %v", err)
		}
		return &out
	}
	t.Fatal("example manifest holds no PrometheusJmxExporter")
	return nil
}

func TestExampleIsAccepted(t *testing.T) {
	example := readExample(t)
	cs := clientset(t)
	ns := namespace(t, cluster(t))
	ctx := context.Background()

	created, err := cs.JmxV1alpha1().PrometheusJmxExporters(ns).Create(ctx, example, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the API server refused the example: %v", err)
	}
	got, err := cs.JmxV1alpha1().PrometheusJmxExporters(ns).Get(ctx, created.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Every field of the example survives the round trip: nothing was pruned.
	if !equalJSON(t, got.Spec, example.Spec) {
		t.Errorf("stored spec differs from the example\nstored:  %s\nexample: %s", mustJSON(t, got.Spec), mustJSON(t, example.Spec))
	}
}

func TestSchemaDefaultsPortStrategyAndConfigMapKey(t *testing.T) {
	cs := clientset(t)
	ns := namespace(t, cluster(t))
	ctx := context.Background()

	in := minimalExporter("defaults")
	in.Spec.Config = &jmxv1alpha1.ExporterConfig{ConfigMapName: "jmx"}
	out, err := cs.JmxV1alpha1().PrometheusJmxExporters(ns).Create(ctx, in, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out.Spec.Port != jmxv1alpha1.DefaultPort {
		t.Errorf("port = %d, want the default %d", out.Spec.Port, jmxv1alpha1.DefaultPort)
	}
	if out.Spec.Injection.Strategy != jmxv1alpha1.DefaultInjectionStrategy {
		t.Errorf("strategy = %q, want the default %q", out.Spec.Injection.Strategy, jmxv1alpha1.DefaultInjectionStrategy)
	}
	if out.Spec.Injection.Mode != jmxv1alpha1.DefaultInjectionMode || out.Spec.Injection.RestartOnRefusal {
		t.Errorf("mode = %q, restartOnRefusal = %v; want the default %q and false", out.Spec.Injection.Mode, out.Spec.Injection.RestartOnRefusal, jmxv1alpha1.DefaultInjectionMode)
	}
	if out.Spec.Config.ConfigMapKey != jmxv1alpha1.DefaultConfigMapKey {
		t.Errorf("configMapKey = %q, want the default %q", out.Spec.Config.ConfigMapKey, jmxv1alpha1.DefaultConfigMapKey)
	}
	if out.Spec.Agent != nil {
		t.Errorf("agent = %+v, want nil: agent defaults stay out of the stored object", out.Spec.Agent)
	}

	// The schema defaults must agree with the Go defaults the operator uses
	// for objects that never went through the API server.
	if got := in.Spec.Defaulted(); got.Port != out.Spec.Port || got.Injection.Strategy != out.Spec.Injection.Strategy ||
		got.Injection.Mode != out.Spec.Injection.Mode || got.Config.ConfigMapKey != out.Spec.Config.ConfigMapKey {
		t.Errorf("Defaulted() = %+v disagrees with the API server's defaults %+v", got, out.Spec)
	}
}

// TestSchemaDefaultsApplyWhenInjectionIsAbsent covers clients that, unlike
// the Go types, can leave spec.injection out entirely (kubectl, YAML): the
// strategy default must still apply, through the injection: {} default.
func TestSchemaDefaultsApplyWhenInjectionIsAbsent(t *testing.T) {
	env := cluster(t)
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, env)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": jmxv1alpha1.SchemeGroupVersion.String(),
		"kind":       "PrometheusJmxExporter",
		"metadata":   map[string]any{"name": "bare"},
		"spec":       map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "orders"}}},
	}}
	out, err := dyn.Resource(jmxv1alpha1.SchemeGroupVersion.WithResource("prometheusjmxexporters")).Namespace(ns).
		Create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	strategy, _, _ := unstructured.NestedString(out.Object, "spec", "injection", "strategy")
	mode, _, _ := unstructured.NestedString(out.Object, "spec", "injection", "mode")
	port, _, _ := unstructured.NestedInt64(out.Object, "spec", "port")
	if strategy != string(jmxv1alpha1.DefaultInjectionStrategy) || mode != string(jmxv1alpha1.DefaultInjectionMode) || port != int64(jmxv1alpha1.DefaultPort) {
		t.Errorf("stored spec %v, want strategy %s, mode %s and port %d filled in", out.Object["spec"],
			jmxv1alpha1.DefaultInjectionStrategy, jmxv1alpha1.DefaultInjectionMode, jmxv1alpha1.DefaultPort)
	}
}

// TestAPIServerRejectsInvalidSpecs sends raw objects through the dynamic
// client, so that the cases Go types cannot express (no selector at all, an
// unknown strategy) reach the schema unchanged.
func TestAPIServerRejectsInvalidSpecs(t *testing.T) {
	env := cluster(t)
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, env)
	resource := jmxv1alpha1.SchemeGroupVersion.WithResource("prometheusjmxexporters")
	selector := map[string]any{"matchLabels": map[string]any{"app": "orders"}}

	cases := []struct {
		name      string
		spec      map[string]any
		wantField string // the field path the API server's error must name
		wantText  string // and a word of its reason
	}{
		{"missing selector", map[string]any{"port": int64(9404)}, "spec.selector", "Required"},
		{"empty selector", map[string]any{"selector": map[string]any{}}, "spec.selector", "must not be empty"},
		{"selector with empty matchLabels", map[string]any{"selector": map[string]any{"matchLabels": map[string]any{}}}, "spec.selector", "must not be empty"},
		{"selector with empty matchExpressions", map[string]any{"selector": map[string]any{"matchExpressions": []any{}}}, "spec.selector", "must not be empty"},
		{"port 80", map[string]any{"selector": selector, "port": int64(80)}, "spec.port", "greater than or equal to 1024"},
		{"port 1023", map[string]any{"selector": selector, "port": int64(1023)}, "spec.port", "greater than or equal to 1024"},
		{"port 70000", map[string]any{"selector": selector, "port": int64(70000)}, "spec.port", "less than or equal to 65535"},
		{"port 65536", map[string]any{"selector": selector, "port": int64(65536)}, "spec.port", "less than or equal to 65535"},
		{"unknown strategy", map[string]any{"selector": selector, "injection": map[string]any{"strategy": "Sidecar"}}, "spec.injection.strategy", "Unsupported value"},
		{"lower-case strategy", map[string]any{"selector": selector, "injection": map[string]any{"strategy": "exec"}}, "spec.injection.strategy", "Unsupported value"},
		{"unknown mode", map[string]any{"selector": selector, "injection": map[string]any{"mode": "Sidecar"}}, "spec.injection.mode", "Unsupported value"},
		{"lower-case mode", map[string]any{"selector": selector, "injection": map[string]any{"mode": "atStart"}}, "spec.injection.mode", "Unsupported value"},
		{"restartOnRefusal without a mode", map[string]any{"selector": selector, "injection": map[string]any{"restartOnRefusal": true}}, "spec.injection", "restartOnRefusal needs mode Both"},
		{"restartOnRefusal with AtStart", map[string]any{"selector": selector, "injection": map[string]any{"mode": "AtStart", "restartOnRefusal": true}}, "spec.injection", "restartOnRefusal needs mode Both"},
		{"config without configMapName", map[string]any{"selector": selector, "config": map[string]any{"configMapKey": "config.yaml"}}, "spec.config.configMapName", "Required"},
		{"invalid container name", map[string]any{"selector": selector, "containers": []any{"App_1"}}, "spec.containers[0]", "should match"},
		{"relative agent path", map[string]any{"selector": selector, "agent": map[string]any{"path": "agent.jar"}}, "spec.agent.path", "should match"},
		// spec.podMonitor: what Prometheus Operator's own schema and
		// validation refuse (the rest: PodMonitorSettings.Validate).
		{"podMonitor interval not a duration", map[string]any{"selector": selector, "podMonitor": map[string]any{"interval": "30 s"}}, "spec.podMonitor.interval", "should match"},
		{"podMonitor scrapeTimeout without interval", map[string]any{"selector": selector, "podMonitor": map[string]any{"scrapeTimeout": "5s"}}, "spec.podMonitor", "scrapeTimeout needs interval"},
		{"podMonitor negative sampleLimit", map[string]any{"selector": selector, "podMonitor": map[string]any{"sampleLimit": int64(-1)}}, "spec.podMonitor.sampleLimit", "greater than or equal to 0"},
		{"podMonitor unknown action", map[string]any{"selector": selector, "podMonitor": map[string]any{"metricRelabelings": []any{map[string]any{"action": "delete"}}}}, "spec.podMonitor.metricRelabelings[0].action", "Unsupported value"},
		{"podMonitor replace without targetLabel", map[string]any{"selector": selector, "podMonitor": map[string]any{"metricRelabelings": []any{map[string]any{"sourceLabels": []any{"a"}}}}}, "spec.podMonitor.metricRelabelings[0]", "need targetLabel"},
		{"podMonitor hashmod without modulus", map[string]any{"selector": selector, "podMonitor": map[string]any{"metricRelabelings": []any{map[string]any{"action": "HashMod", "targetLabel": "s"}}}}, "spec.podMonitor.metricRelabelings[0]", "modulus"},
		{"podMonitor keepequal with regex", map[string]any{"selector": selector, "podMonitor": map[string]any{"metricRelabelings": []any{map[string]any{"action": "keepequal", "targetLabel": "s", "regex": "x"}}}}, "spec.podMonitor.metricRelabelings[0]", "only sourceLabels and targetLabel"},
		{"podMonitor labeldrop with sourceLabels", map[string]any{"selector": selector, "podMonitor": map[string]any{"metricRelabelings": []any{map[string]any{"action": "labeldrop", "sourceLabels": []any{"a"}}}}}, "spec.podMonitor.metricRelabelings[0]", "only regex"},
		{"podMonitor lowercase with replacement", map[string]any{"selector": selector, "podMonitor": map[string]any{"metricRelabelings": []any{map[string]any{"action": "lowercase", "targetLabel": "s", "replacement": "x"}}}}, "spec.podMonitor.metricRelabelings[0]", "no replacement"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": jmxv1alpha1.SchemeGroupVersion.String(),
				"kind":       "PrometheusJmxExporter",
				"metadata":   map[string]any{"name": fmt.Sprintf("invalid-%d", i)},
				"spec":       tc.spec,
			}}
			_, err := dyn.Resource(resource).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{})
			if err == nil {
				t.Fatalf("the API server accepted spec %v", tc.spec)
			}
			t.Logf("rejected: %v", err)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("error = %v (%T), want 422 Invalid from schema validation", err, err)
			}
			// The field must be a structured cause, not just text, because
			// clients (kubectl, the operator's events) rely on the field path.
			var status apierrors.APIStatus
			if !errors.As(err, &status) || status.Status().Details == nil {
				t.Fatalf("error %v carries no details", err)
			}
			found := false
			for _, cause := range status.Status().Details.Causes {
				if cause.Field == tc.wantField && strings.Contains(cause.Message, tc.wantText) {
					found = true
				}
			}
			if !found {
				t.Errorf("causes %+v hold no %q cause saying %q", status.Status().Details.Causes, tc.wantField, tc.wantText)
			}
		})
	}
	list, err := dyn.Resource(resource).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d invalid objects were stored", len(list.Items))
	}
}

// TestAPIServerAcceptsBoundaryValues guards the other side of the
// validation: the limits themselves and every strategy are allowed.
func TestAPIServerAcceptsBoundaryValues(t *testing.T) {
	cs := clientset(t)
	ns := namespace(t, cluster(t))
	cases := []struct {
		name   string
		modify func(*jmxv1alpha1.PrometheusJmxExporter)
	}{
		{"port 1024", func(p *jmxv1alpha1.PrometheusJmxExporter) { p.Spec.Port = 1024 }},
		{"port 65535", func(p *jmxv1alpha1.PrometheusJmxExporter) { p.Spec.Port = 65535 }},
		{"strategy Exec", func(p *jmxv1alpha1.PrometheusJmxExporter) { p.Spec.Injection.Strategy = jmxv1alpha1.InjectionExec }},
		{"mode AtStart", func(p *jmxv1alpha1.PrometheusJmxExporter) { p.Spec.Injection.Mode = jmxv1alpha1.InjectionModeAtStart }},
		{"mode Both with restartOnRefusal", func(p *jmxv1alpha1.PrometheusJmxExporter) {
			p.Spec.Injection.Mode, p.Spec.Injection.RestartOnRefusal = jmxv1alpha1.InjectionModeBoth, true
		}},
		{"strategy EphemeralContainer", func(p *jmxv1alpha1.PrometheusJmxExporter) {
			p.Spec.Injection.Strategy = jmxv1alpha1.InjectionEphemeralContainer
		}},
		{"matchExpressions only", func(p *jmxv1alpha1.PrometheusJmxExporter) {
			p.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "app", Operator: metav1.LabelSelectorOpExists},
			}}
		}},
		{"agent overrides", func(p *jmxv1alpha1.PrometheusJmxExporter) {
			p.Spec.Agent = &jmxv1alpha1.Agent{Image: "registry.example/agent:1", Path: "/agent.jar", AttachHelperPath: "/attach"}
		}},
		{"podMonitor settings", func(p *jmxv1alpha1.PrometheusJmxExporter) {
			p.Spec.PodMonitor = &jmxv1alpha1.PodMonitorSettings{Interval: "1h20m15s", ScrapeTimeout: "15d", SampleLimit: ptr.To[int64](0),
				MetricRelabelings: []jmxv1alpha1.RelabelConfig{
					{Action: "drop", SourceLabels: []string{"__name__"}, Regex: "jvm_(.*"}, // the regex is the operator's to check
					{Action: "LabelKeep", Regex: "__name__|area"},
					{Action: "keepequal", SourceLabels: []string{"a"}, TargetLabel: "b"},
					{Action: "hashmod", SourceLabels: []string{"pod"}, TargetLabel: "shard", Modulus: 4},
					{Action: "replace", SourceLabels: []string{"pod"}, TargetLabel: "p", Replacement: ptr.To("$1")},
				}}
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := minimalExporter(fmt.Sprintf("valid-%d", i))
			tc.modify(p)
			got, err := cs.JmxV1alpha1().PrometheusJmxExporters(ns).Create(context.Background(), p, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("the API server refused a valid spec: %v", err)
			}
			want := p.Spec.DeepCopy()
			want.Port = got.Spec.Port // the schema default fills what the case left unset
			if want.Injection.Strategy == "" {
				want.Injection.Strategy = got.Spec.Injection.Strategy
			}
			if want.Injection.Mode == "" {
				want.Injection.Mode = got.Spec.Injection.Mode
			}
			if !equalJSON(t, got.Spec, *want) {
				t.Errorf("stored spec %s, sent %s", mustJSON(t, got.Spec), mustJSON(t, p.Spec))
			}
		})
	}
}

// TestClientsetCRUDAndWatch drives every verb of the generated typed client
// and checks the status subresource's split: Update ignores status,
// UpdateStatus ignores spec.
func TestClientsetCRUDAndWatch(t *testing.T) {
	cs := clientset(t)
	ns := namespace(t, cluster(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := cs.JmxV1alpha1().PrometheusJmxExporters(ns)

	initial, err := client.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(initial.Items) != 0 {
		t.Fatalf("fresh namespace lists %d exporters", len(initial.Items))
	}
	w, err := client.Watch(ctx, metav1.ListOptions{ResourceVersion: initial.ResourceVersion})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()

	created, err := client.Create(ctx, minimalExporter("orders"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if created.UID == "" || created.Generation != 1 {
		t.Fatalf("created object has uid %q generation %d", created.UID, created.Generation)
	}

	got, err := client.Get(ctx, "orders", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.UID != created.UID {
		t.Fatalf("get returned uid %s, created %s", got.UID, created.UID)
	}

	// Update through the main resource: the spec change applies, the status
	// change is dropped by the status subresource's strategy.
	got.Spec.Port = 9500
	got.Status.MatchedPods = 7
	updated, err := client.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if updated.Spec.Port != 9500 || updated.Generation != 2 {
		t.Errorf("after update: port %d generation %d, want 9500 and 2", updated.Spec.Port, updated.Generation)
	}
	if updated.Status.MatchedPods != 0 {
		t.Errorf("Update changed status.matchedPods to %d; the status subresource should ignore it", updated.Status.MatchedPods)
	}

	// UpdateStatus: the status change applies, a spec change is dropped and
	// the generation does not move.
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	updated.Spec.Port = 9600
	updated.Status = jmxv1alpha1.PrometheusJmxExporterStatus{
		ObservedGeneration: updated.Generation,
		MatchedPods:        2,
		InjectedPods:       1,
		FailedPods:         1,
		Conditions: []metav1.Condition{{
			Type: jmxv1alpha1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: updated.Generation,
			Reason: jmxv1alpha1.ReasonInjectionFailed, Message: "pod orders-1: attach refused", LastTransitionTime: now,
		}},
		MetricsEndpoints: []jmxv1alpha1.MetricsEndpoint{{
			Pod: "orders-0", Container: "app", PodIP: "10.0.0.7", Port: 9500,
			ContainerID: "containerd://abc", InjectedAt: now,
		}},
	}
	statusUpdated, err := client.UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	if statusUpdated.Spec.Port != 9500 || statusUpdated.Generation != 2 {
		t.Errorf("UpdateStatus changed the spec: port %d generation %d, want 9500 and 2", statusUpdated.Spec.Port, statusUpdated.Generation)
	}
	if !equalJSON(t, statusUpdated.Status, updated.Status) {
		t.Errorf("stored status %s, sent %s", mustJSON(t, statusUpdated.Status), mustJSON(t, updated.Status))
	}

	listed, err := client.List(ctx, metav1.ListOptions{LabelSelector: "team=payments"})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(listed.Items) != 1 || listed.Items[0].Status.InjectedPods != 1 {
		t.Fatalf("list by label returned %d items (%+v), want the one exporter with its status", len(listed.Items), listed.Items)
	}
	none, err := client.List(ctx, metav1.ListOptions{LabelSelector: "team=other"})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(none.Items) != 0 {
		t.Errorf("list by a label no one has returned %d items", len(none.Items))
	}

	if err := client.Delete(ctx, "orders", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := client.Get(ctx, "orders", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: %v, want NotFound", err)
	}

	want := []watch.EventType{watch.Added, watch.Modified, watch.Modified, watch.Deleted}
	var seen []watch.EventType
	for len(seen) < len(want) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed after %v", seen)
			}
			p, isExporter := ev.Object.(*jmxv1alpha1.PrometheusJmxExporter)
			if !isExporter {
				t.Fatalf("watch delivered %T (%v)", ev.Object, ev.Object)
			}
			if p.UID != created.UID {
				t.Fatalf("watch delivered uid %s, want %s", p.UID, created.UID)
			}
			seen = append(seen, ev.Type)
		case <-ctx.Done():
			t.Fatalf("watch delivered %v before the deadline, want %v", seen, want)
		}
	}
	if !slices.Equal(seen, want) {
		t.Errorf("watch events = %v, want %v", seen, want)
	}
}

// TestPrinterColumnsShowStatus asks the API server for the table kubectl
// prints, proving that the column paths point at real fields.
func TestPrinterColumnsShowStatus(t *testing.T) {
	cs := clientset(t)
	ns := namespace(t, cluster(t))
	ctx := context.Background()
	client := cs.JmxV1alpha1().PrometheusJmxExporters(ns)

	p, err := client.Create(ctx, minimalExporter("columns"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = jmxv1alpha1.PrometheusJmxExporterStatus{
		MatchedPods: 3, InjectedPods: 3, FailedPods: 0,
		Conditions: []metav1.Condition{{
			Type: jmxv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: jmxv1alpha1.ReasonAllInjected,
			Message: "3 of 3 pods injected", LastTransitionTime: metav1.Now(),
		}, {
			Type: jmxv1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: jmxv1alpha1.ReasonAsExpected,
			Message: "no failures", LastTransitionTime: metav1.Now(),
		}},
	}
	if _, err := client.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	raw, err := cs.JmxV1alpha1().RESTClient().Get().Namespace(ns).Resource("prometheusjmxexporters").Name("columns").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(ctx).Raw()
	if err != nil {
		t.Fatalf("table request: %v", err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatalf("decoding table: %v\n%s", err, raw)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("table has %d rows", len(table.Rows))
	}
	cells := map[string]any{}
	for i, col := range table.ColumnDefinitions {
		cells[col.Name] = table.Rows[0].Cells[i]
	}
	// JSON numbers decode as float64.
	want := map[string]any{"Name": "columns", "Port": float64(9404), "Matched": float64(3), "Injected": float64(3), "Failed": float64(0), "Ready": "True"}
	for name, value := range want {
		if cells[name] != value {
			t.Errorf("column %s = %v (%T), want %v", name, cells[name], cells[name], value)
		}
	}
	if _, ok := cells["Age"]; !ok {
		t.Errorf("table has no Age column: %v", cells)
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	return mustJSON(t, a) == mustJSON(t, b)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
