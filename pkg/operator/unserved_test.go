package operator_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
	"github.com/handlerkit/handlerkit/pkg/operator"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// statusWrites counts the successful PUTs on exporters' status subresource,
// by exporter name, of every operator whose requests go through it.
type statusWrites struct {
	rt    http.RoundTripper
	count map[string]*atomic.Int32
}

// wrap is a rest.Config.Wrap function through w.
func (s *statusWrites) wrap(rt http.RoundTripper) http.RoundTripper {
	return &statusWrites{rt: rt, count: s.count}
}

func (s *statusWrites) RoundTrip(req *http.Request) (*http.Response, error) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	if req.Method == http.MethodPut && len(parts) > 2 && parts[len(parts)-1] == "status" && parts[len(parts)-3] == "prometheusjmxexporters" {
		resp, err := s.rt.RoundTrip(req)
		if c, ok := s.count[parts[len(parts)-2]]; ok && err == nil && resp.StatusCode == http.StatusOK {
			c.Add(1)
		}
		return resp, err
	}
	return s.rt.RoundTrip(req)
}

// runOperator runs an operator serving ns with ReportUnserved until the test
// ends, its API requests through wrap, and returns its metrics registry.
func runOperator(t *testing.T, cfg *rest.Config, ns string, wrap func(http.RoundTripper) http.RoundTripper) *prometheus.Registry {
	t.Helper()
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	cfg = rest.CopyConfig(cfg)
	if wrap != nil {
		cfg.Wrap(wrap)
	}
	reg := prometheus.NewRegistry()
	op, err := sdk.New(cfg, sdk.WithScheme(scheme), sdk.WithRegisterer(reg), sdk.WithGatherer(reg),
		sdk.WithMetricsAddr("0"), sdk.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	r, err := operator.Setup(op, operator.Options{Namespaces: ns, ReportUnserved: true, DisablePodMonitors: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && err != context.Canceled {
			t.Errorf("Run: %v", err)
		}
		r.Wait()
	})
	return reg
}

// handled is how many times the watch's handler ran.
func handled(t *testing.T, reg *prometheus.Registry, watch string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "handlerkit_handle_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "watch" && l.GetValue() == watch {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestExportersOfUnservedNamespacesSayNotServed runs two namespaced
// operators against a real API server, one serving "served", the other
// "team-b", both reporting unserved namespaces. An exporter in a third
// namespace gets NotServed=True and Ready=False naming the served namespace,
// written once per generation, no finalizer, and its pods are left alone;
// exporters in the served namespaces carry no NotServed, and the two
// operators do not fight over each other's exporters.
func TestExportersOfUnservedNamespacesSayNotServed(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := env.InstallCRDsFromDir(ctx, "../../deploy/crds"); err != nil {
		t.Fatal(err)
	}
	var served, teamB, other string
	for _, p := range []struct {
		ns     *string
		prefix string
	}{{&served, "served"}, {&teamB, "team-b"}, {&other, "other"}} {
		ns, err := env.CreateNamespace(ctx, p.prefix)
		if err != nil {
			t.Fatal(err)
		}
		*p.ns = ns
	}
	kube := env.Clientset()
	jmx, err := versioned.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	// writes counts both operators' writes; byFirst the first operator's.
	writes := &statusWrites{count: map[string]*atomic.Int32{"lonely": {}}}
	byFirst := &statusWrites{count: map[string]*atomic.Int32{"b": {}}}
	reg := runOperator(t, env.Config(), served, func(rt http.RoundTripper) http.RoundTripper { return byFirst.wrap(writes.wrap(rt)) })
	regB := runOperator(t, env.Config(), teamB, writes.wrap)

	labels := map[string]string{"app": "orders"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "jvm", Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "jvm-app"}}}}
	if _, err := kube.CoreV1().Pods(other).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newExporter := func(ns, name string) {
		t.Helper()
		ex := &jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: jmxv1alpha1.PrometheusJmxExporterSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}}}
		if _, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Create(ctx, ex, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(ns, name string) *jmxv1alpha1.PrometheusJmxExporter {
		t.Helper()
		ex, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ex
	}
	newExporter(other, "lonely")
	newExporter(served, "mine")
	newExporter(teamB, "b")

	notServed := func(ex *jmxv1alpha1.PrometheusJmxExporter) bool {
		c := meta.FindStatusCondition(ex.Status.Conditions, jmxv1alpha1.ConditionNotServed)
		return c != nil && c.Status == metav1.ConditionTrue && ex.Status.ObservedGeneration == ex.Generation
	}
	waitFor(t, func() bool { return notServed(get(other, "lonely")) })
	ex := get(other, "lonely")
	ns := meta.FindStatusCondition(ex.Status.Conditions, jmxv1alpha1.ConditionNotServed)
	ready := meta.FindStatusCondition(ex.Status.Conditions, jmxv1alpha1.ConditionReady)
	// Either operator may have written it first; the message names the
	// namespaces of the one that did, and only those.
	if ns.Reason != jmxv1alpha1.ReasonNotServed || !strings.Contains(ns.Message, "namespace "+other+" is not served") ||
		strings.Contains(ns.Message, served) == strings.Contains(ns.Message, teamB) {
		t.Errorf("NotServed: %s: %s", ns.Reason, ns.Message)
	}
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != jmxv1alpha1.ReasonNotServed {
		t.Errorf("Ready: %+v", ready)
	}
	if len(ex.Finalizers) != 0 {
		t.Errorf("finalizers on an unserved exporter: %v", ex.Finalizers)
	}
	// The status is stored before the writer's client has its answer (and
	// counts the write): wait for the count, then check it is exact.
	waitFor(t, func() bool { return writes.count["lonely"].Load() >= 1 })
	if n := writes.count["lonely"].Load(); n != 1 {
		t.Errorf("%d status writes, want 1", n)
	}

	// A change that is not a new generation (a label) is handled and not
	// written again, by neither operator; a new spec is, once.
	before, beforeB := handled(t, reg, operator.WatchUnserved), handled(t, regB, operator.WatchUnserved)
	ex.Labels = map[string]string{"touched": "yes"}
	if _, err := jmx.JmxV1alpha1().PrometheusJmxExporters(other).Update(ctx, ex, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return handled(t, reg, operator.WatchUnserved) > before && handled(t, regB, operator.WatchUnserved) > beforeB
	})
	if n := writes.count["lonely"].Load(); n != 1 {
		t.Errorf("%d status writes after a label change, want still 1", n)
	}
	// The operators' conflicting writes, if any, are requeued: wait until
	// both have handled the new generation's outcome before counting.
	// The state an operator keeps in the status (here a proven change and a
	// claim at start, as a webhook may write one before the exporter's
	// operator has taken it) survives the report, which replaces only what
	// the status says of pods and conditions.
	ex = get(other, "lonely")
	kept := ex.DeepCopy()
	kept.Status.Proven = &jmxv1alpha1.ProvenChange{Generation: ex.Generation, ConfigSHA256: "0123", ProvenAt: metav1.Now()}
	kept.Status.AtStartCanary = &jmxv1alpha1.AtStartCanary{Generation: ex.Generation, ConfigSHA256: "0123", ClaimedAt: metav1.Now()}
	if _, err := jmx.JmxV1alpha1().PrometheusJmxExporters(other).UpdateStatus(ctx, kept, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ex = get(other, "lonely")
	ex.Spec.Port = 9999
	if _, err := jmx.JmxV1alpha1().PrometheusJmxExporters(other).Update(ctx, ex, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return notServed(get(other, "lonely")) })
	waitFor(t, func() bool { return writes.count["lonely"].Load() >= 2 })
	if n := writes.count["lonely"].Load(); n != 2 {
		t.Errorf("%d status writes after a new generation, want 2", n)
	}
	if got := get(other, "lonely").Status; got.Proven == nil || got.AtStartCanary == nil {
		t.Errorf("the report dropped the operator's state: proven %v, atStartCanary %v", got.Proven, got.AtStartCanary)
	}

	// The pod of the unserved namespace is untouched.
	p, err := kube.CoreV1().Pods(other).Get(ctx, "jvm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Annotations) != 0 || len(p.Spec.EphemeralContainers) != 0 {
		t.Errorf("the unserved pod was changed: annotations %v, ephemeral containers %d", p.Annotations, len(p.Spec.EphemeralContainers))
	}

	// The served exporters: their own operator's status, no NotServed.
	for _, c := range []struct{ ns, name string }{{served, "mine"}, {teamB, "b"}} {
		waitFor(t, func() bool {
			ex := get(c.ns, c.name)
			return slices.Contains(ex.Finalizers, operator.Finalizer) && ex.Status.ObservedGeneration == ex.Generation &&
				meta.FindStatusCondition(ex.Status.Conditions, jmxv1alpha1.ConditionReady) != nil &&
				meta.FindStatusCondition(ex.Status.Conditions, jmxv1alpha1.ConditionNotServed) == nil
		})
	}
	// Once team-b's operator holds "b", the first operator leaves it: a
	// change of b's spec reaches the first operator's unserved watch, which
	// writes nothing.
	bWrites := byFirst.count["b"].Load()
	before = handled(t, reg, operator.WatchUnserved)
	b := get(teamB, "b")
	b.Spec.Port = 9998
	if _, err := jmx.JmxV1alpha1().PrometheusJmxExporters(teamB).Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return handled(t, reg, operator.WatchUnserved) > before })
	if n := byFirst.count["b"].Load(); n != bWrites {
		t.Errorf("the first operator wrote the status of team-b's exporter %d more times", n-bWrites)
	}
}
