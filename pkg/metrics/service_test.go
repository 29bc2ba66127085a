package metrics_test

import (
	"bytes"
	"context"
	"flag"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/handlerkit/handlerkit/pkg/metrics"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// update rewrites the ServiceMonitors that test/monitoring feeds to Prometheus Operator's selection:
// go test ./pkg/metrics -run TestEnsureService -update.
var update = flag.Bool("update", false, "rewrite test/monitoring/cmd/scrapeconfig/testdata from what EnsureService writes")

// serviceMonitorCRD is the smallest ServiceMonitor definition that makes discovery list the kind.
func serviceMonitorCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "servicemonitors.monitoring.coreos.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "monitoring.coreos.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "servicemonitors", Singular: "servicemonitor", Kind: "ServiceMonitor", ListKind: "ServiceMonitorList",
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve,
				}},
			}},
		},
	}
}

func quietLogger() logrus.FieldLogger {
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	return l
}

// TestEnsureService shares one control plane between its subtests; the ServiceMonitor subtests run last because
// installing the CRD changes discovery for every namespace.
func TestEnsureService(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	kube := env.Clientset()
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	newNS := func(t *testing.T) string {
		ns, err := env.CreateNamespace(ctx, "metrics")
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}
	createPod := func(t *testing.T, ns, name string, labels map[string]string, owner *metav1.OwnerReference) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "operator:test"}}},
		}
		if owner != nil {
			pod.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// deploymentChain creates a Deployment and a ReplicaSet it controls, as the controllers would, and returns
	// a controller reference to the ReplicaSet for a pod.
	deploymentChain := func(t *testing.T, ns, name string) (*appsv1.Deployment, *metav1.OwnerReference) {
		podLabels := map[string]string{"app": name}
		template := corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "operator:test"}}},
		}
		dep, err := kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: podLabels},
				Template: template,
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rsLabels := maps.Clone(podLabels)
		rsLabels["pod-template-hash"] = "abc123"
		template.Labels = rsLabels
		rs, err := kube.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{
				Name: name + "-abc123", Namespace: ns, Labels: rsLabels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))},
			},
			Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: rsLabels}, Template: template},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return dep, metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
	}

	t.Run("owned by the Deployment and named after it", func(t *testing.T) {
		ns := newNS(t)
		dep, rsRef := deploymentChain(t, ns, "jmx-operator")
		createPod(t, ns, "jmx-operator-abc123-x1", map[string]string{"app": "jmx-operator", "pod-template-hash": "abc123"}, rsRef)
		svc, err := metrics.EnsureService(ctx, env.Config(), metrics.ServiceOptions{
			Namespace: ns, PodName: "jmx-operator-abc123-x1", Logger: quietLogger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Name != "jmx-operator-metrics" {
			t.Errorf("Service name = %s, want jmx-operator-metrics", svc.Name)
		}
		if len(svc.OwnerReferences) != 1 || svc.OwnerReferences[0].UID != dep.UID || svc.OwnerReferences[0].Kind != "Deployment" {
			t.Errorf("owners = %+v, want the Deployment %s", svc.OwnerReferences, dep.UID)
		}
		// Every replica, across ReplicaSet revisions, is selected; the leader label is not required.
		if want := map[string]string{"app": "jmx-operator"}; !maps.Equal(svc.Spec.Selector, want) {
			t.Errorf("selector = %v, want %v", svc.Spec.Selector, want)
		}
		if p := svc.Spec.Ports; len(p) != 1 || p[0].Port != metrics.DefaultMetricsPort || p[0].Name != metrics.DefaultMetricsPortName {
			t.Errorf("ports = %+v", p)
		}
	})

	t.Run("no owner without a Deployment", func(t *testing.T) {
		ns := newNS(t)
		createPod(t, ns, "op-0", map[string]string{"app": "op"}, nil)
		svc, err := metrics.EnsureService(ctx, env.Config(), metrics.ServiceOptions{
			OperatorName: "op", Namespace: ns, PodName: "op-0", Logger: quietLogger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(svc.OwnerReferences) != 0 {
			t.Errorf("owners = %+v, want none", svc.OwnerReferences)
		}
		_, err = metrics.EnsureService(ctx, env.Config(), metrics.ServiceOptions{Namespace: ns, PodName: "op-0", Logger: quietLogger()})
		if err == nil || !strings.Contains(err.Error(), "OperatorName is required") {
			t.Errorf("without OperatorName or Deployment: err = %v, want OperatorName is required", err)
		}
	})

	t.Run("scrape only the leader adds the leader label", func(t *testing.T) {
		ns := newNS(t)
		createPod(t, ns, "op-0", map[string]string{"app": "op", "leader": "true"}, nil)
		svc, err := metrics.EnsureService(ctx, env.Config(), metrics.ServiceOptions{
			OperatorName: "op", Namespace: ns, PodName: "op-0", ScrapeOnlyLeader: true, Logger: quietLogger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]string{"app": "op", "leader": "true"}; !maps.Equal(svc.Spec.Selector, want) {
			t.Errorf("selector = %v, want %v", svc.Spec.Selector, want)
		}
	})

	t.Run("repeated calls update in place and keep the ClusterIP", func(t *testing.T) {
		ns := newNS(t)
		createPod(t, ns, "op-0", map[string]string{"app": "op"}, nil)
		opts := metrics.ServiceOptions{OperatorName: "op", Namespace: ns, PodName: "op-0", Logger: quietLogger()}
		first, err := metrics.EnsureService(ctx, env.Config(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if first.Spec.ClusterIP == "" {
			t.Fatal("no ClusterIP allocated")
		}
		if _, err := metrics.EnsureService(ctx, env.Config(), opts); err != nil {
			t.Fatalf("second call: %v", err)
		}
		opts.ScrapeOnlyLeader, opts.Port = true, 9090
		third, err := metrics.EnsureService(ctx, env.Config(), opts)
		if err != nil {
			t.Fatalf("call with changed options: %v", err)
		}
		if third.UID != first.UID || third.Spec.ClusterIP != first.Spec.ClusterIP {
			t.Errorf("Service replaced: uid %s -> %s, clusterIP %s -> %s", first.UID, third.UID, first.Spec.ClusterIP, third.Spec.ClusterIP)
		}
		if third.Spec.Selector["leader"] != "true" || third.Spec.Ports[0].Port != 9090 {
			t.Errorf("update not applied: selector %v, ports %+v", third.Spec.Selector, third.Spec.Ports)
		}
	})

	t.Run("bad input is a clear error", func(t *testing.T) {
		ns := newNS(t)
		cases := []struct {
			name string
			opts metrics.ServiceOptions
			want string
		}{
			{"unknown namespace", metrics.ServiceOptions{OperatorName: "op", Selector: map[string]string{"a": "b"}}, "namespace is unknown"},
			{"bad port", metrics.ServiceOptions{Namespace: ns, OperatorName: "op", Selector: map[string]string{"a": "b"}, Port: 70000}, "invalid port"},
			{"bad name", metrics.ServiceOptions{Namespace: ns, OperatorName: "Op_X", Selector: map[string]string{"a": "b"}}, "invalid Service name"},
			{"no selector", metrics.ServiceOptions{Namespace: ns, OperatorName: "op"}, "empty selector"},
			{"missing pod", metrics.ServiceOptions{Namespace: ns, OperatorName: "op", PodName: "nope"}, "get own pod"},
			{"bad monitor label key", metrics.ServiceOptions{Namespace: ns, OperatorName: "op", Selector: map[string]string{"a": "b"},
				ServiceMonitorLabels: map[string]string{"bad key": "x"}}, `ServiceMonitor label key "bad key"`},
			{"bad monitor label value", metrics.ServiceOptions{Namespace: ns, OperatorName: "op", Selector: map[string]string{"a": "b"},
				ServiceMonitorLabels: map[string]string{"release": "not ok!"}}, `ServiceMonitor label release value "not ok!"`},
			{"framework's label", metrics.ServiceOptions{Namespace: ns, OperatorName: "op", Selector: map[string]string{"a": "b"},
				ServiceMonitorLabels: map[string]string{metrics.LabelName: "other"}}, "is the framework's own"},
		}
		for _, tc := range cases {
			t.Setenv("POD_NAMESPACE", "")
			t.Setenv("POD_NAME", "")
			opts := tc.opts
			opts.Logger = quietLogger()
			if _, err := metrics.EnsureService(ctx, env.Config(), opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.want)
			}
		}
		if _, err := metrics.EnsureService(ctx, nil, metrics.ServiceOptions{}); err == nil {
			t.Error("nil config accepted")
		}
		// Refused before anything is written.
		if _, err := kube.CoreV1().Services(ns).Get(ctx, "op-metrics", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a Service was written for refused options: %v", err)
		}
	})

	t.Run("no ServiceMonitor kind: skipped quietly", func(t *testing.T) {
		ns := newNS(t)
		createPod(t, ns, "op-0", map[string]string{"app": "op"}, nil)
		if _, err := metrics.EnsureService(ctx, env.Config(), metrics.ServiceOptions{
			OperatorName: "op", Namespace: ns, PodName: "op-0", Logger: quietLogger(),
		}); err != nil {
			t.Fatal(err)
		}
		_, err := dyn.Resource(metrics.ServiceMonitorGVR).Namespace(ns).Get(ctx, "op-metrics", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("ServiceMonitor lookup: %v, want NotFound", err)
		}
	})

	t.Run("ServiceMonitor created and updated when the kind exists", func(t *testing.T) {
		if err := env.InstallCRDs(ctx, serviceMonitorCRD()); err != nil {
			t.Fatal(err)
		}
		ns := newNS(t)
		dep, rsRef := deploymentChain(t, ns, "op")
		createPod(t, ns, "op-abc123-x1", map[string]string{"app": "op", "pod-template-hash": "abc123"}, rsRef)
		opts := metrics.ServiceOptions{Namespace: ns, PodName: "op-abc123-x1", Logger: quietLogger()}
		svc, err := metrics.EnsureService(ctx, env.Config(), opts)
		if err != nil {
			t.Fatal(err)
		}
		sm, err := dyn.Resource(metrics.ServiceMonitorGVR).Namespace(ns).Get(ctx, "op-metrics", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("ServiceMonitor: %v", err)
		}
		sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		if !maps.Equal(sel, svc.Labels) {
			t.Errorf("ServiceMonitor selects %v, the Service is labelled %v", sel, svc.Labels)
		}
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(eps) != 1 || eps[0].(map[string]any)["port"] != metrics.DefaultMetricsPortName {
			t.Errorf("endpoints = %v, want one on port %s", eps, metrics.DefaultMetricsPortName)
		}
		if o := sm.GetOwnerReferences(); len(o) != 1 || o[0].UID != dep.UID {
			t.Errorf("ServiceMonitor owners = %+v, want the Deployment", o)
		}

		opts.ScrapeInterval = "15s"
		if _, err := metrics.EnsureService(ctx, env.Config(), opts); err != nil {
			t.Fatalf("second call: %v", err)
		}
		sm2, err := dyn.Resource(metrics.ServiceMonitorGVR).Namespace(ns).Get(ctx, "op-metrics", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eps, _, _ = unstructured.NestedSlice(sm2.Object, "spec", "endpoints")
		if sm2.GetUID() != sm.GetUID() || len(eps) != 1 || eps[0].(map[string]any)["interval"] != "15s" {
			t.Errorf("ServiceMonitor not updated in place: uid %s -> %s, endpoints %v", sm.GetUID(), sm2.GetUID(), eps)
		}
	})

	t.Run("ServiceMonitorLabels are set, kept in sync and removed", func(t *testing.T) {
		if err := env.InstallCRDs(ctx, serviceMonitorCRD()); err != nil {
			t.Fatal(err)
		}
		ns := newNS(t)
		createPod(t, ns, "op-0", map[string]string{"app": "op"}, nil)
		monitors := dyn.Resource(metrics.ServiceMonitorGVR).Namespace(ns)
		opts := metrics.ServiceOptions{OperatorName: "op", Namespace: ns, PodName: "op-0", Logger: quietLogger(),
			ServiceMonitorLabels: map[string]string{"release": "kps", "team": "jvm"}}
		svc, err := metrics.EnsureService(ctx, env.Config(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := svc.Labels["release"]; ok {
			t.Errorf("the Service got the ServiceMonitor's labels: %v", svc.Labels)
		}
		sm, err := monitors.Get(ctx, "op-metrics", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"release": "kps", "team": "jvm", metrics.LabelName: "op", metrics.LabelComponent: "metrics"}
		if !maps.Equal(sm.GetLabels(), want) {
			t.Errorf("labels = %v, want %v", sm.GetLabels(), want)
		}
		if sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels"); !maps.Equal(sel, svc.Labels) {
			t.Errorf("the ServiceMonitor selects %v, the Service is labelled %v", sel, svc.Labels)
		}

		// The same options again: nothing to write. (The apiserver would skip a no-op update without a new
		// resourceVersion, so the requests are counted.)
		var puts atomic.Int32
		counting := env.Config()
		counting.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/servicemonitors/") {
					puts.Add(1)
				}
				return rt.RoundTrip(r)
			})
		})
		if _, err := metrics.EnsureService(ctx, counting, opts); err != nil {
			t.Fatal(err)
		}
		if n := puts.Load(); n != 0 {
			t.Errorf("an unchanged ServiceMonitor was updated (%d PUTs)", n)
		}
		same, err := monitors.Get(ctx, "op-metrics", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if same.GetResourceVersion() != sm.GetResourceVersion() {
			t.Errorf("an unchanged ServiceMonitor was written again: resourceVersion %s -> %s", sm.GetResourceVersion(), same.GetResourceVersion())
		}

		// Someone else labels it; then release changes and team is dropped.
		same.SetLabels(map[string]string{"release": "kps", "team": "jvm", metrics.LabelName: "op", metrics.LabelComponent: "metrics", "owner": "ops"})
		if _, err := monitors.Update(ctx, same, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		opts.ServiceMonitorLabels = map[string]string{"release": "kps-2"}
		if _, err := metrics.EnsureService(ctx, env.Config(), opts); err != nil {
			t.Fatal(err)
		}
		changed, err := monitors.Get(ctx, "op-metrics", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want = map[string]string{"release": "kps-2", "owner": "ops", metrics.LabelName: "op", metrics.LabelComponent: "metrics"}
		if !maps.Equal(changed.GetLabels(), want) || changed.GetUID() != sm.GetUID() {
			t.Errorf("after a change: labels %v (want %v), uid %s -> %s", changed.GetLabels(), want, sm.GetUID(), changed.GetUID())
		}

		// None at all: the recorded ones go, the record too.
		opts.ServiceMonitorLabels = nil
		if _, err := metrics.EnsureService(ctx, env.Config(), opts); err != nil {
			t.Fatal(err)
		}
		cleared, err := monitors.Get(ctx, "op-metrics", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want = map[string]string{"owner": "ops", metrics.LabelName: "op", metrics.LabelComponent: "metrics"}
		if _, recorded := cleared.GetAnnotations()[metrics.AnnotationServiceMonitorLabels]; !maps.Equal(cleared.GetLabels(), want) || recorded {
			t.Errorf("without ServiceMonitorLabels: labels %v (want %v), annotations %v", cleared.GetLabels(), want, cleared.GetAnnotations())
		}
	})

	// test/monitoring (a module of its own, with Prometheus Operator's dependencies) proves that kube-prometheus-
	// stack's default serviceMonitorSelector selects the ServiceMonitor EnsureService writes with
	// ServiceMonitorLabels release=kps and not the one without. Its input is written here, from the apiserver,
	// and compared on every run, so that the proof cannot drift from the code.
	t.Run("the ServiceMonitors test/monitoring selects are the ones written here", func(t *testing.T) {
		if err := env.InstallCRDs(ctx, serviceMonitorCRD()); err != nil {
			t.Fatal(err)
		}
		for file, labels := range map[string]map[string]string{
			"operator-servicemonitor-release-kps.yaml": {"release": "kps"},
			"operator-servicemonitor.yaml":             nil,
		} {
			ns := newNS(t)
			_, rsRef := deploymentChain(t, ns, "prometheus-jmx-exporter-operator")
			createPod(t, ns, "prometheus-jmx-exporter-operator-abc123-x1",
				map[string]string{"app": "prometheus-jmx-exporter-operator", "pod-template-hash": "abc123"}, rsRef)
			if _, err := metrics.EnsureService(ctx, env.Config(), metrics.ServiceOptions{
				Namespace: ns, PodName: "prometheus-jmx-exporter-operator-abc123-x1", ServiceMonitorLabels: labels, Logger: quietLogger(),
			}); err != nil {
				t.Fatal(err)
			}
			sm, err := dyn.Resource(metrics.ServiceMonitorGVR).Namespace(ns).Get(ctx, "prometheus-jmx-exporter-operator-metrics", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := fixture(t, sm, ns)
			path := filepath.Join("..", "..", "test", "monitoring", "cmd", "scrapeconfig", "testdata", file)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			old, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./pkg/metrics -run TestEnsureService -update writes it)", err)
			}
			if !bytes.Equal(old, got) {
				t.Errorf("%s is not the ServiceMonitor EnsureService writes; rerun with -update and commit it.\nwritten:\n%s\nfile:\n%s", path, got, old)
			}
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// fixture is sm as YAML without what the apiserver assigns (uid, resourceVersion, times, managed fields) and with
// its namespace ns, which the test environment names at random, replaced by "monitoring".
func fixture(t *testing.T, sm *unstructured.Unstructured, ns string) []byte {
	t.Helper()
	sm = sm.DeepCopy()
	for _, f := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"} {
		unstructured.RemoveNestedField(sm.Object, "metadata", f)
	}
	sm.SetNamespace("monitoring")
	owners := sm.GetOwnerReferences()
	for i := range owners {
		owners[i].UID = "00000000-0000-0000-0000-000000000000"
	}
	sm.SetOwnerReferences(owners)
	names, _, err := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
	if err != nil || len(names) != 1 || names[0] != ns {
		t.Fatalf("namespaceSelector.matchNames = %v (%v), want [%s]", names, err, ns)
	}
	if err := unstructured.SetNestedStringSlice(sm.Object, []string{"monitoring"}, "spec", "namespaceSelector", "matchNames"); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(sm.Object)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("# Written by go test ./pkg/metrics -run TestEnsureService -update, from the apiserver; do not edit.\n"), out...)
}
