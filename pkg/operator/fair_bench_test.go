package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/operator"
	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// BenchmarkRolloutByParallelism measures what --parallelism buys: a rollout
// of 100 JVM pods that start running at once, under an exporter that is
// already proven, with the real EphemeralContainer strategy and the
// operator's production client limits (pkg/sdk DefaultClientQPS and
// DefaultClientBurst); the test plays the kubelet and answers every
// ephemeral container at once with jmx-attach's result for one JVM. It
// reports the container starts recorded per second, from marking the pods
// running to the last record. Run it with
//
//	go test -run '^$' -bench RolloutByParallelism -benchtime 3x ./pkg/operator/
func BenchmarkRolloutByParallelism(b *testing.B) {
	for _, par := range []int{1, 2, 8, 32} {
		b.Run(fmt.Sprintf("parallelism=%d", par), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				total += rollout(b, par, 100)
			}
			b.ReportMetric(float64(100*b.N)/total.Seconds(), "starts/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// rollout runs one rollout of n pods and returns how long it took.
func rollout(b *testing.B, parallelism, n int) time.Duration {
	c := newCluster(b, 5*time.Minute)
	env, ctx, kube, jmx := c.env, c.ctx, c.kube, c.jmx
	ns := c.namespace(b, "rollout")
	defer func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) }()

	kctx, stopKubelet := context.WithCancel(ctx)
	kubeletDone := make(chan struct{})
	go func() { defer close(kubeletDone); watchKubelet(kctx, kube, ns) }()
	defer func() { stopKubelet(); <-kubeletDone }()

	// The operator, with the client limits it has in production.
	cfg := rest.CopyConfig(env.Config())
	cfg.QPS, cfg.Burst = 0, 0
	scheme, err := operator.Scheme()
	if err != nil {
		b.Fatal(err)
	}
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	op, err := sdk.New(cfg, sdk.WithScheme(scheme), sdk.WithRegisterer(prometheus.NewRegistry()), sdk.WithMetricsAddr("0"), sdk.WithLogger(log))
	if err != nil {
		b.Fatal(err)
	}
	r, err := operator.Setup(op, operator.Options{Namespaces: ns, Parallelism: parallelism, BreakerWindow: time.Second,
		AgentImage: "agent:test"})
	if err != nil {
		b.Fatal(err)
	}
	octx, stopOperator := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- op.Run(octx) }()
	defer func() { stopOperator(); <-done; r.Wait() }()

	labels := map[string]string{"app": "orders"}
	create := func(name string) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "jvm-app"}}}}
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	run := func(name string) {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.5"
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", ContainerID: "containerd://" + name, Ready: true,
			Image: "jvm-app", ImageID: "sha256:1", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
		if _, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// A first pod proves the exporter (one container first for the breaker
	// window); the rollout's pods wait, created but not running.
	create("first")
	run("first")
	ex := &jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Name: "orders"},
		Spec: jmxv1alpha1.PrometheusJmxExporterSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Create(ctx, ex, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	recorded := func() int {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		k := 0
		for _, p := range pods.Items {
			if strings.Contains(p.Annotations[operator.AnnotationAgents], `"jvms"`) {
				k++
			}
		}
		return k
	}
	for recorded() < 1 {
		if ctx.Err() != nil {
			b.Fatal("the first pod was never injected")
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Logf("parallelism %d: the exporter is proven", parallelism)
	time.Sleep(2 * time.Second) // the breaker window (1s) passes
	for i := range n {
		create(fmt.Sprintf("pod-%04d", i))
	}
	b.StartTimer()
	start := time.Now()
	for i := range n {
		run(fmt.Sprintf("pod-%04d", i))
	}
	for recorded() < n+1 {
		if ctx.Err() != nil {
			b.Fatalf("%d of %d recorded", recorded()-1, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(start)
	b.StopTimer()
	b.Logf("parallelism %d: %d container starts recorded in %s", parallelism, n, took.Round(time.Millisecond))
	return took
}

// watchKubelet plays the kubelet for every pod of ns: each ephemeral
// container without a status ends at once with jmx-attach's result for one
// JVM (jvmLoaded).
func watchKubelet(ctx context.Context, kube kubernetes.Interface, ns string) {
	for ctx.Err() == nil {
		w, err := kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			changed := false
			for _, ec := range p.Spec.EphemeralContainers {
				changed = endEphemeral(p, ec, jvmLoaded(ec)) || changed
			}
			if changed {
				// A conflict means a newer pod, whose event comes next.
				_, _ = kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			}
		}
		w.Stop()
	}
}
