package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// BenchmarkJVMStartToFirstScrape measures, over 20 JVM pods started one
// after another while an exporter selects them, the time from each JVM's
// process start (read from /proc on this host, to the clock tick) to the
// first successful scrape of its agent through the pod IP, polled every 50 ms
// from the moment the pod has an IP. Pods start one at a time so that the figure is the
// operator's latency, not two cores starved by twenty JVMs starting at once.
// It reports p50, p99 and the maximum in seconds, and the p50 of each step
// as a watch on the pod saw it (startLatency: the container shown running,
// the kubelet's share before the operator can know of the JVM; the
// operator's ephemeral container added, running and ended; its record), so
// that the figure says whose time it is. Each pod's steps are logged; -v
// prints all of them.
//
//	go test -run '^$' -bench JVMStartToFirstScrape -benchtime 1x -v ./test/e2e/
func BenchmarkJVMStartToFirstScrape(b *testing.B) {
	for _, strategy := range []jmxv1alpha1.InjectionStrategy{jmxv1alpha1.InjectionEphemeralContainer, jmxv1alpha1.InjectionExec} {
		b.Run(string(strategy), func(b *testing.B) { benchStartToScrape(b, strategy) })
	}
}

func benchStartToScrape(b *testing.B, strategy jmxv1alpha1.InjectionStrategy) {
	const pods = 21 // the first one opens the exporter's change
	for i := 0; i < b.N; i++ {
		ns, err := env.CreateNamespace(context.Background(), "bench-start")
		if err != nil {
			b.Fatal(err)
		}
		deployOperator(b, ns, withExec(), withArgs("--breaker-window="+operator.DefaultBreakerWindow.String()))
		labels := map[string]string{"app": "bench"}
		ex := exporter("bench", labels, func(ex *jmxv1alpha1.PrometheusJmxExporter) { ex.Spec.Injection.Strategy = strategy })
		if _, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Create(context.Background(), ex, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		var measured []startLatency
		for p := 0; p < pods; p++ {
			name := fmt.Sprintf("jvm-%02d", p)
			d, err := startToScrape(ns, name, 3*time.Minute, func() error {
				_, err := kube.CoreV1().Pods(ns).Create(context.Background(), jvmPod(name, labels, testimages.JVMAppRef), metav1.CreateOptions{})
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			if p == 0 {
				// The first pod of a new exporter is the change's first
				// container: the others wait until it has run the breaker
				// window (docs/operator.md, Safety). Report it apart, and
				// let the window pass, a configured time, before the pods
				// that show the steady state.
				b.ReportMetric(d.scraped.Seconds(), "first-s")
				time.Sleep(operator.DefaultBreakerWindow + 2*time.Second) // a deliberate pause: the configured window, see above
				continue
			}
			b.Logf("%s: %s", name, d)
			measured = append(measured, d)
		}
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		reportSteps(b, measured, strategy == jmxv1alpha1.InjectionEphemeralContainer)
	}
}

// reportSteps reports the p50 of each step's time from the JVM's start, and
// p50, p99 and the maximum of the first scrape.
func reportSteps(b *testing.B, measured []startLatency, ephemeral bool) {
	steps := []step{
		{"running-p50-s", func(l startLatency) time.Duration { return l.running }},
		{"recorded-p50-s", func(l startLatency) time.Duration { return l.recorded }},
	}
	if ephemeral {
		steps = append(steps,
			step{"ec-added-p50-s", func(l startLatency) time.Duration { return l.ecAdded }},
			step{"ec-running-p50-s", func(l startLatency) time.Duration { return l.ecRunning }},
			step{"ec-done-p50-s", func(l startLatency) time.Duration { return l.ecDone }})
	}
	for _, st := range steps {
		var v []float64
		for _, l := range measured {
			v = append(v, st.of(l).Seconds())
		}
		sort.Float64s(v)
		b.ReportMetric(quantile(v, 0.5), st.unit)
	}
	var lat []float64
	for _, l := range measured {
		lat = append(lat, l.scraped.Seconds())
	}
	sort.Float64s(lat)
	b.ReportMetric(quantile(lat, 0.5), "p50-s")
	b.ReportMetric(quantile(lat, 0.99), "p99-s")
	b.ReportMetric(lat[len(lat)-1], "max-s")
}

// step is one step of an injection as reportSteps reports it: its metric's
// unit and its time from the JVM's start.
type step struct {
	unit string
	of   func(startLatency) time.Duration
}

// startLatency is when, after a JVM started, each step of its injection was
// seen: the API server showed its container running (the kubelet's share,
// before the operator can know of the JVM), the operator's ephemeral
// container appeared in the pod's spec, showed running and ended (the
// EphemeralContainer strategy), the operator's record of the JVM appeared on
// the pod, and its agent answered a scrape. Steps not seen are zero.
type startLatency struct {
	running, ecAdded, ecRunning, ecDone, recorded, scraped time.Duration
}

// String lists the steps in milliseconds from the JVM's start.
func (l startLatency) String() string {
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	return fmt.Sprintf("running %d ms, ephemeral container added %d ms, running %d ms, ended %d ms, recorded %d ms, scraped %d ms",
		ms(l.running), ms(l.ecAdded), ms(l.ecRunning), ms(l.ecDone), ms(l.recorded), ms(l.scraped))
}

// podSteps are the times at which a watch on one pod first saw each step.
type podSteps struct {
	mu                                        sync.Mutex
	ip, containerID                           string
	running, ecAdded, ecRunning, ecDone, recd time.Time
}

// see records the steps p shows that were not seen before, at now.
func (s *podSteps) see(p *corev1.Pod, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := func(t *time.Time, ok bool) {
		if ok && t.IsZero() {
			*t = now
		}
	}
	if s.ip == "" {
		s.ip = p.Status.PodIP
	}
	if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil && s.containerID == "" {
		s.containerID = p.Status.ContainerStatuses[0].ContainerID
		first(&s.running, true)
	}
	first(&s.ecAdded, len(p.Spec.EphemeralContainers) > 0)
	for _, st := range p.Status.EphemeralContainerStatuses {
		first(&s.ecRunning, st.State.Running != nil || st.State.Terminated != nil)
		first(&s.ecDone, st.State.Terminated != nil)
	}
	first(&s.recd, strings.Contains(p.Annotations[operator.AnnotationAgents], `"jvms"`))
}

// snapshot returns the pod's IP and container ID as last seen.
func (s *podSteps) snapshot() (ip, containerID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ip, s.containerID
}

// startToScrape watches the pod that create creates, stamping each step when
// the watch delivers it, polls its agent every 50 ms from the moment the pod
// has an IP, and returns each step's time from the JVM's start. The start is
// read from the JVM's process on this host (the node shares its kernel), to
// the clock tick: the status' jvmStartedAt is whole seconds, and so is the
// boot time jmx-attach adds to the process start, so together they can put the
// start up to two seconds early.
func startToScrape(ns, pod string, timeout time.Duration, create func() error) (startLatency, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	w, err := kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod})
	if err != nil {
		return startLatency{}, err
	}
	defer w.Stop()
	steps := &podSteps{}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				steps.see(p, time.Now())
			}
		}
	}()
	defer func() { w.Stop(); <-watched }()
	if err := create(); err != nil {
		return startLatency{}, err
	}
	var scraped time.Time
	for scraped.IsZero() && ctx.Err() == nil {
		if ip, _ := steps.snapshot(); ip != "" {
			if body, err := scrape(ip, jmxv1alpha1.DefaultPort); err == nil {
				if _, ok := metricValue(body, heapMetric); ok {
					scraped = time.Now()
					break
				}
			}
		}
		time.Sleep(50 * time.Millisecond) // the poll interval (the latency's resolution) of a wait with the caller's deadline
	}
	if scraped.IsZero() {
		return startLatency{}, fmt.Errorf("%s: no scrape within %s", pod, timeout)
	}
	// The record and the ephemeral container's end can follow the first
	// scrape: jmx-attach checks the agent's port before it ends.
	for ctx.Err() == nil {
		steps.mu.Lock()
		done := !steps.recd.IsZero() && steps.containerID != ""
		steps.mu.Unlock()
		if done {
			break
		}
		time.Sleep(50 * time.Millisecond) // the poll interval of a wait with the caller's deadline
	}
	_, containerID := steps.snapshot()
	started, err := jvmStart(containerID)
	if err != nil {
		return startLatency{}, fmt.Errorf("%s: %w", pod, err)
	}
	steps.mu.Lock()
	defer steps.mu.Unlock()
	since := func(t time.Time) time.Duration {
		if t.IsZero() {
			return 0
		}
		return t.Sub(started)
	}
	return startLatency{running: since(steps.running), ecAdded: since(steps.ecAdded), ecRunning: since(steps.ecRunning),
		ecDone: since(steps.ecDone), recorded: since(steps.recd), scraped: scraped.Sub(started)}, nil
}

// jvmStart finds the JVM of a container among this host's processes, by the
// container ID in its cgroup, and returns when it started: its start in clock
// ticks after boot, added to the boot time read from CLOCK_BOOTTIME (exact,
// where /proc/stat's btime is whole seconds).
func jvmStart(containerID string) (time.Time, error) {
	_, id, ok := strings.Cut(containerID, "://")
	if !ok || id == "" {
		return time.Time{}, fmt.Errorf("no container ID (%q)", containerID)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return time.Time{}, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil || !strings.Contains(string(cg), id) {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		st, err := jvm.ParseStat(data)
		if err != nil || st.Comm != "java" {
			continue
		}
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
			return time.Time{}, err
		}
		boot := time.Now().Add(-time.Duration(ts.Nano()))
		return boot.Add(time.Duration(st.StartTicks) * (time.Second / clockTicks)), nil
	}
	return time.Time{}, fmt.Errorf("no java process in container %s on this host", id)
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's start time: 100 on
// every Linux ABI.
const clockTicks = 100

func quantile(sorted []float64, q float64) float64 {
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

// BenchmarkFiftyPods measures the time until one exporter has injected fifty
// JVM pods that already run, and the operator's peak resident memory meanwhile
// (from its own process_resident_memory_bytes).
//
//	go test -run '^$' -bench FiftyPods -benchtime 1x ./test/e2e/
func BenchmarkFiftyPods(b *testing.B) {
	const n = 50
	for i := 0; i < b.N; i++ {
		ns, err := env.CreateNamespace(context.Background(), "bench-fifty")
		if err != nil {
			b.Fatal(err)
		}
		deployOperator(b, ns, withArgs("--breaker-window="+operator.DefaultBreakerWindow.String()))
		labels := map[string]string{"app": "fifty"}
		for p := 0; p < n; p++ {
			if _, err := kube.CoreV1().Pods(ns).Create(context.Background(), jvmPod(fmt.Sprintf("jvm-%02d", p), labels, testimages.JVMAppRef), metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		waitAllRunning(b, ns, "app=fifty", n)
		var peak float64
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				if v, ok := operatorRSS(ns); ok && v > peak {
					peak = v
				}
				select {
				case <-stop:
					return
				case <-time.After(500 * time.Millisecond):
				}
			}
		}()
		start := time.Now()
		if _, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Create(context.Background(), exporter("fifty", labels), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		for {
			ex, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Get(context.Background(), "fifty", metav1.GetOptions{})
			if err == nil && ex.Status.InjectedPods == n {
				break
			}
			if time.Since(start) > 15*time.Minute {
				b.Fatalf("not all injected: %+v", ex.Status)
			}
			time.Sleep(250 * time.Millisecond) // the poll interval of a wait with a 15-minute deadline
		}
		took := time.Since(start)
		close(stop)
		<-done
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		b.ReportMetric(took.Seconds(), "all-injected-s")
		b.ReportMetric(peak/1e6, "operator-peak-rss-MB")
	}
}

// operatorRSS reads the leader's process_resident_memory_bytes through its
// pod IP.
func operatorRSS(ns string) (float64, bool) {
	pods, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + operatorName})
	if err != nil {
		return 0, false
	}
	var best float64
	for _, p := range pods.Items {
		if p.Status.PodIP == "" {
			continue
		}
		body, err := scrape(p.Status.PodIP, 8383)
		if err != nil {
			continue
		}
		if v, ok := metricValue(body, "process_resident_memory_bytes"); ok && v > best {
			best = v
		}
	}
	return best, best > 0
}

func waitAllRunning(b *testing.B, ns, selector string, n int) {
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		list, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err == nil {
			running := 0
			for _, p := range list.Items {
				if p.Status.Phase == "Running" && p.Status.PodIP != "" {
					running++
				}
			}
			if running == n {
				return
			}
		}
		time.Sleep(time.Second) // the poll interval of a wait with a 10-minute deadline
	}
	b.Fatalf("%d pods not running within 10m", n)
}
