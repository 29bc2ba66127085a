package operator_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/operator"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// BenchmarkOperatorHeap runs the operator in this process against the real
// API server with OPERATOR_HEAP_PODS pods (default 500) that one exporter
// selects, created while it runs, as the scale benchmark does; a scripted
// strategy answers each injection after OPERATOR_HEAP_DELAY (default 200ms). It reports the peak heap in
// use while the pods are recorded (sampled every 20 ms) and the heap still
// in use per pod once every pod is recorded. OPERATOR_HEAP_PROFILE names a
// file for the heap profile taken at the highest sample.
func BenchmarkOperatorHeap(b *testing.B) {
	pods, delay := 500, 200*time.Millisecond
	if v := os.Getenv("OPERATOR_HEAP_PODS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		pods = n
	}
	if v := os.Getenv("OPERATOR_HEAP_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		delay = d
	}
	for b.Loop() {
		peak, retained := heapRun(b, pods, delay, os.Getenv("OPERATOR_HEAP_PROFILE"))
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		b.ReportMetric(float64(retained)/float64(pods), "live-B/pod")
	}
}

// heapRun is one run of BenchmarkOperatorHeap: the peak heap in use, and
// the heap in use at the end above the one before the operator started.
func heapRun(b testing.TB, n int, delay time.Duration, profile string) (peak, retained uint64) {
	// A loaded machine starts the API server slowly; the benchmark runs
	// alone (-run '^$'), so it may still set how long the start may take.
	sharedCluster.Options = append(sharedCluster.Options, testenv.WithStartTimeout(5*time.Minute))
	c := newCluster(b, 30*time.Minute)
	env, ctx, kube, jmx := c.env, c.ctx, c.kube, c.jmx
	ns := c.namespace(b, "heap-")
	labels := map[string]string{"app": "heap"}
	ex := &jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Name: "heap"},
		Spec: jmxv1alpha1.PrometheusJmxExporterSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Create(ctx, ex, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}

	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	base := ms.HeapInuse

	strategy := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer), answer: func(c call, r inject.Request) (inject.Outcome, error) {
		time.Sleep(delay)
		return loaded(r, ""), nil
	}}
	startOperator(b, ctx, env.Config(), operator.Options{Namespaces: ns, Client: kube, BreakerWindow: time.Second,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: strategy}})

	// The sampler keeps the highest HeapInuse, and the profile at it.
	var high atomic.Uint64
	sampled := make(chan struct{})
	sctx, stopSampler := context.WithCancel(ctx)
	go func() {
		defer close(sampled)
		var ms goruntime.MemStats
		written := uint64(0)
		for sctx.Err() == nil {
			goruntime.ReadMemStats(&ms)
			if ms.HeapInuse > high.Load() {
				high.Store(ms.HeapInuse)
				if profile != "" && ms.HeapInuse > written+written/10 {
					written = ms.HeapInuse
					if f, err := os.Create(profile); err == nil {
						_ = pprof.Lookup("heap").WriteTo(f, 0)
						f.Close()
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// The pods, created and reported running by 8 writers, as a
	// Deployment's rollout would.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				name := fmt.Sprintf("jvm-%05d", i)
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "jvm-app"}}}}
				created, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
				if err != nil {
					errs <- err
					return
				}
				created.Status.Phase, created.Status.PodIP = corev1.PodRunning, "10.0.0.5"
				created.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", ContainerID: "containerd://" + name, Ready: true,
					Image: "jvm-app", ImageID: "sha256:1", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
				if _, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	for {
		got, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Get(ctx, "heap", metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if int(got.Status.InjectedPods) == n {
			break
		}
		if ctx.Err() != nil {
			b.Fatalf("%d of %d pods injected", got.Status.InjectedPods, n)
		}
		time.Sleep(time.Second)
	}
	stopSampler()
	<-sampled
	goruntime.GC()
	goruntime.ReadMemStats(&ms)
	if profile != "" {
		if f, err := os.Create(profile + ".end"); err == nil {
			_ = pprof.Lookup("heap").WriteTo(f, 0)
			f.Close()
		}
	}
	if ms.HeapInuse > base {
		retained = ms.HeapInuse - base
	}
	return high.Load() - base, retained
}

// startOperator runs an operator in this process on the API server of cfg
// until the test ends, and returns its Reconciler.
func startOperator(t testing.TB, ctx context.Context, cfg *rest.Config, o operator.Options) *operator.Reconciler {
	t.Helper()
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	op, err := sdk.New(cfg, sdk.WithScheme(scheme), sdk.WithRegisterer(prometheus.NewRegistry()),
		sdk.WithMetricsAddr("0"), sdk.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	r, err := operator.Setup(op, o)
	if err != nil {
		t.Fatal(err)
	}
	octx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- op.Run(octx) }()
	t.Cleanup(func() {
		stop()
		<-done
		r.Wait()
	})
	return r
}

// TestConfigMapsAreHeldOnlyAsFarAsExportersReadThem: the operator caches
// the identities of a namespace's ConfigMaps and the data of the one its
// exporter reads, not of the others (a large one here, with kubectl's copy
// of itself in an annotation); it reads that one's data from the API server
// once per change, not once per look, and still reacts to its changes and
// its deletion.
func TestConfigMapsAreHeldOnlyAsFarAsExportersReadThem(t *testing.T) {
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "configmaps-")
	labels := c.jvmPods(t, ns)
	c.configMap(t, ns, "cfg", "rules:\n- pattern: \".*\"\n")
	blob := strings.Repeat("x", 200<<10)
	unrelated := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unrelated",
		Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": blob}}, Data: map[string]string{"blob": blob}}
	if _, err := c.kube.CoreV1().ConfigMaps(ns).Create(c.ctx, unrelated, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var gets atomic.Int32
	cfg := rest.CopyConfig(c.env.Config())
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/namespaces/"+ns+"/configmaps/") {
				gets.Add(1)
			}
			return rt.RoundTrip(req)
		})
	})
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer), answer: func(c call, r inject.Request) (inject.Outcome, error) {
		return loaded(r, ""), nil
	}}
	r := startOperator(t, c.ctx, cfg, operator.Options{Namespaces: ns, Client: c.kube, Resync: 500 * time.Millisecond, BreakerWindow: time.Second,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}})
	c.createExporter(t, ns, "orders", labels, withConfigMap("cfg"))
	c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected)

	if n := operator.ConfigMapsHeld(r); n != 1 {
		t.Errorf("the data of %d ConfigMaps is held, want 1 (cfg)", n)
	}
	m, err := operator.CachedConfigMap(c.ctx, r, ns, "unrelated")
	if err != nil {
		t.Fatal(err)
	}
	if m.ResourceVersion == "" || len(m.Annotations) > 0 || len(m.Labels) > 0 {
		t.Errorf("the cache holds more than the identity of a ConfigMap no exporter reads: %d annotations, resourceVersion %q", len(m.Annotations), m.ResourceVersion)
	}
	// Resyncs every 500 ms look at the exporter again: its config comes
	// from memory.
	first := gets.Load()
	if first < 1 {
		t.Fatalf("%d GETs of ConfigMaps, want the one read of cfg", first)
	}
	hold(t, 3*time.Second, "no GET of a ConfigMap that did not change", func() (bool, string) {
		return gets.Load() == first, fmt.Sprintf("%d GETs, %d before", gets.Load(), first)
	})

	// A change reaches the exporter and its agents.
	c.configMap(t, ns, "cfg", "rule: x\n")
	c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionConfigValid, metav1.ConditionFalse, jmxv1alpha1.ReasonConfigInvalid)
	next := "rules:\n- pattern: \"java.lang.*\"\n"
	c.configMap(t, ns, "cfg", next)
	waitUntil(t, 90*time.Second, "the agents given the changed config", func() (bool, string) {
		n := s.count(func(cl call) bool { return cl.reconfigure && cl.config == next })
		return n >= 3, fmt.Sprintf("%d reconfigurations with it", n)
	})
	c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionConfigValid, metav1.ConditionTrue, jmxv1alpha1.ReasonConfigLoaded)

	// Its deletion too, and its data goes.
	if err := c.kube.CoreV1().ConfigMaps(ns).Delete(c.ctx, "cfg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionConfigValid, metav1.ConditionFalse, jmxv1alpha1.ReasonConfigMapNotFound)
	if n := operator.ConfigMapsHeld(r); n != 0 {
		t.Errorf("the data of %d ConfigMaps is held after cfg's deletion, want 0", n)
	}
}
