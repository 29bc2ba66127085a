package operator_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/operator"
	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// These tests prove issue 28's bounds on the status side: an exporter's
// object stays small whatever its pod count, and a container start at
// steady state costs at most three API writes.

// apiCalls counts API requests by verb and resource ("patch
// pods/ephemeralcontainers"), as the Kubernetes audit log names them.
type apiCalls struct {
	mu sync.Mutex
	n  map[string]int
}

// wrap is a rest.Config.Wrap function that counts through a.
func (a *apiCalls) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.StatusCode < 300 {
			verb, resource := sdk.RequestVerb(req.Method, req.URL)
			a.mu.Lock()
			if a.n == nil {
				a.n = map[string]int{}
			}
			a.n[verb+" "+resource]++
			a.mu.Unlock()
		}
		return resp, err
	})
}

// writes returns the successful writes (create, update, patch, delete) by
// "verb resource", and their sum.
func (a *apiCalls) writes() (map[string]int, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out, sum := map[string]int{}, 0
	for k, n := range a.n {
		switch verb, _, _ := strings.Cut(k, " "); verb {
		case "create", "update", "patch", "delete":
			out[k] = n
			sum += n
		}
	}
	return out, sum
}

// since returns the writes in now that were not in before.
func since(before, now map[string]int) (map[string]int, int) {
	out, sum := map[string]int{}, 0
	for k, n := range now {
		if d := n - before[k]; d > 0 {
			out[k] = d
			sum += d
		}
	}
	return out, sum
}

func table(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %-45s %d", k, m[k])
	}
	return b.String()
}

// answerEphemeralContainers plays the kubelet for every pod of ns: each
// ephemeral container that has no status yet ends at once with jmx-attach's
// result for one JVM, in the format jmx-attach writes.
func answerEphemeralContainers(ctx context.Context, kube kubernetes.Interface, ns string) {
	result := jvm.FormatTerminationLog([]jvm.InjectResult{{PID: 41, NSPID: 1, MainClass: "app.Main", Status: jvm.OutcomeOK, Port: 9404}})
	for ctx.Err() == nil {
		w, err := kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond) // the API server is away; ctx ends the loop
			continue
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if answerEphemeral(p, result) {
				// A conflict means a newer version of the pod is on its way
				// in this watch: it is answered then.
				_, _ = kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			}
		}
		w.Stop()
	}
}

// answerEphemeral gives each ephemeral container of p that has no status
// yet the status of one that ended at once with result as its termination
// message, and says whether it gave any.
func answerEphemeral(p *corev1.Pod, result []byte) bool {
	have := map[string]bool{}
	for _, st := range p.Status.EphemeralContainerStatuses {
		have[st.Name] = true
	}
	changed := false
	for _, ec := range p.Spec.EphemeralContainers {
		if have[ec.Name] {
			continue
		}
		p.Status.EphemeralContainerStatuses = append(p.Status.EphemeralContainerStatuses, corev1.ContainerStatus{
			Name: ec.Name, Image: ec.Image, ImageID: "sha256:2", ContainerID: "containerd://" + ec.Name,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
				Message: string(result), ContainerID: "containerd://" + ec.Name}}})
		changed = true
	}
	return changed
}

// TestAContainerStartCostsAtMostThreeWrites counts, through the operator's
// own clients, the API writes of container restarts at steady state, with
// the EphemeralContainer strategy and a kubelet that answers at once: one
// patch of pods/ephemeralcontainers (the agent), one patch of the pod (its
// record), no Event (the new start got what the previous one had: the
// record and the log say so), and a share of one write of the exporter's
// status, whose only change is the details of the sample's entries: it is
// written once the new starts are recorded, at most once per
// operator.StatusDelay (issue 41: before, never, and the status kept the
// old container IDs). At most three writes a start. Restarts are done one
// after another, each on an exporter at rest.
func TestAContainerStartCostsAtMostThreeWrites(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 5*time.Minute)
	ns := c.namespace(t, "writes")
	calls := &apiCalls{}
	c.wrap = calls.wrap
	labels := map[string]string{"app": "orders"}
	const pods, rounds = 10, 2
	name := func(i int) string { return fmt.Sprintf("orders-%02d", i) }
	for i := 0; i < pods; i++ {
		c.createJVMPod(t, ns, name(i), labels, fmt.Sprintf("containerd://%s-s1", name(i)))
	}
	kubeletCtx, stopKubelet := context.WithCancel(c.ctx)
	kubeletDone := make(chan struct{})
	go func() {
		defer close(kubeletDone)
		answerEphemeralContainers(kubeletCtx, c.kube, ns)
	}()
	defer func() { stopKubelet(); <-kubeletDone }()

	var r *operator.Reconciler
	c.runOperatorWith(t, ns, operator.Options{BreakerWindow: time.Second, AgentImage: "agent:test"}, func(rc *operator.Reconciler) {
		r = rc
		operator.SetStatusDelay(r, 200*time.Millisecond) // the rollout's status, soon
	})
	c.createExporter(t, ns, "orders", labels)
	waitUntil(t, 2*time.Minute, "every pod injected and the status written", func() (bool, string) {
		ex := c.exporter(t, ns, "orders")
		ready := meta.FindStatusCondition(ex.Status.Conditions, jmxv1alpha1.ConditionReady)
		return ex.Status.InjectedPods == pods && ex.Status.MetricsEndpointCount == pods && ready != nil && ready.Status == metav1.ConditionTrue,
			fmt.Sprintf("%+v", ex.Status)
	})
	// quiet waits until the operator has written at least events Events
	// since base (they are written in the background), no status write
	// waits, and no write happened for three seconds.
	quiet := func(what string, base map[string]int, events int) {
		t.Helper()
		_, last := calls.writes()
		stable := time.Now()
		waitUntil(t, 2*time.Minute, what, func() (bool, string) {
			now, n := calls.writes()
			if n != last {
				last, stable = n, time.Now()
			}
			w, _ := since(base, now)
			written := w["create events"] + w["patch events"]
			waiting := operator.StatusWaits(r, ns+"/orders")
			return written >= events && !waiting && time.Since(stable) > 3*time.Second,
				fmt.Sprintf("%d Events of %d, a status write waiting: %v, writes:%s", written, events, waiting, table(w))
		})
	}
	// The rollout's Injected Events: one on each pod, one on the exporter
	// for each.
	quiet("the rollout's writes done", nil, 2*pods)
	// A delay longer than any restart below takes: whether the status is
	// written is then a matter of what changed, not of how fast this
	// machine injects. Nothing may be left waiting at the end.
	operator.SetStatusDelay(r, time.Minute)
	before, _ := calls.writes()
	statusBefore := c.exporter(t, ns, "orders").Status

	starts := 0
	for round := 2; round < 2+rounds; round++ {
		for i := 0; i < pods; i++ {
			prev := c.record(t, ns, name(i))
			id := fmt.Sprintf("containerd://%s-s%d", name(i), round)
			// Each start ran for an hour: its end is no concern of the breaker.
			end := metav1.NewTime(prev.InjectedAt.Add(time.Hour))
			c.startContainer(t, ns, name(i), id, &corev1.ContainerStateTerminated{ContainerID: prev.ContainerID, ExitCode: 0,
				Reason: "Completed", FinishedAt: end})
			waitUntil(t, time.Minute, "start "+id+" injected", func() (bool, string) {
				rec := c.record(t, ns, name(i))
				return rec.ContainerID == id && len(rec.JVMs) == 1, fmt.Sprintf("%+v", rec)
			})
			starts++
		}
	}
	quiet("the restarts' writes done", before, 0)
	now, _ := calls.writes()
	byKind, total := since(before, now)
	t.Logf("API writes of %d container starts at steady state (per start %.2f):%s", starts, float64(total)/float64(starts), table(byKind))
	if total > 3*starts {
		events, err := c.kube.CoreV1().Events(ns).List(c.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			t.Logf("Event %s %s/%s %s x%d: %.200s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Count, e.Message)
		}
	}
	if total > 3*starts {
		t.Errorf("%d writes for %d container starts: over 3 per start", total, starts)
	}
	if n := byKind["create events"] + byKind["patch events"]; n != 0 {
		t.Errorf("%d Event writes for restarts that each got what their previous start had", n)
	}
	for _, k := range []string{"patch pods/ephemeralcontainers", "patch pods"} {
		if byKind[k] != starts {
			t.Errorf("%s: %d, want one per start (%d)", k, byKind[k], starts)
		}
	}
	// One write of the sample, a minute (the delay) after the rollout's,
	// carries every start recorded meanwhile.
	if n := byKind["update prometheusjmxexporters/status"]; n < 1 || n > 2 {
		t.Errorf("%d status writes for %d restarts within the status delay, want 1 (2 if a write fell between)", n, starts)
	}
	// The status a user reads has the same counts and conditions, and names
	// every pod's current container start.
	ex := c.exporter(t, ns, "orders")
	if ex.Status.InjectedPods != statusBefore.InjectedPods || ex.Status.MetricsEndpointCount != statusBefore.MetricsEndpointCount ||
		!sameConditions(ex.Status.Conditions, statusBefore.Conditions) {
		t.Errorf("the status changed: %+v, was %+v", ex.Status, statusBefore)
	}
	for _, e := range ex.Status.MetricsEndpoints {
		if rec := c.record(t, ns, e.Pod); e.ContainerID != rec.ContainerID {
			t.Errorf("the status names %s of pod %s, its current start is %s", e.ContainerID, e.Pod, rec.ContainerID)
		}
	}
}

func sameConditions(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for _, c := range a {
		o := meta.FindStatusCondition(b, c.Type)
		if o == nil || o.Status != c.Status || o.Reason != c.Reason || o.Message != c.Message {
			return false
		}
	}
	return true
}

// TestAnExporterOf10000PodsStaysSmall: the status the operator computes
// for 10,000 pods that carry its records, written to the API server and
// read back, is under 256 KiB, and as large as for 1,000, whatever the
// pods' states: every JVM counted, a sample of MaxStatusEndpoints listed
// (the first by pod name), condition messages that name a bounded number
// of pods. A quarter of the pods failed with a long message, a quarter
// serve an earlier port, the rest are injected.
func TestAnExporterOf10000PodsStaysSmall(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2*time.Minute)
	ns := c.namespace(t, "tenk")
	labels := map[string]string{"app": "orders"}
	c.createExporter(t, ns, "orders", labels)
	ex := c.exporter(t, ns, "orders")
	sum := sha256.Sum256([]byte(jmxv1alpha1.DefaultExporterConfig))
	hash := hex.EncodeToString(sum[:])[:16]
	injected := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	name := func(i int) string { return fmt.Sprintf("orders-7d9c5f6b8d-%05d", i) }
	failure := strings.Repeat("the JVM refused the agent: a long explanation of why. ", 40)[:2048] // the record's bound
	podsOf := func(n int) []*corev1.Pod {
		var pods []*corev1.Pod
		for i := 0; i < n; i++ {
			id := sha256.Sum256([]byte(name(i)))
			cid := "containerd://" + hex.EncodeToString(id[:])
			rec := operator.ContainerRecord{ContainerID: cid, Port: jmxv1alpha1.DefaultPort, ConfigHash: hash, Generation: ex.Generation,
				InjectedAt: &injected, JVMs: []operator.JVMRecord{{PID: 7, Main: "org.springframework.boot.loader.launch.JarLauncher",
					Port: jmxv1alpha1.DefaultPort, StartedAt: &injected}}}
			switch i % 4 {
			case 0:
				rec.JVMs, rec.InjectedAt = nil, nil
				rec.Failure = &operator.Failure{Reason: jmxv1alpha1.ReasonAgentStartFailed, Message: failure}
			case 1:
				rec.Port, rec.JVMs[0].Port = 9400, 9400
			}
			pods = append(pods, recordedPod(name(i), labels, cid, fmt.Sprintf("10.%d.%d.%d", 1+i/65536, i/256%256, i%256), rec))
		}
		return pods
	}
	size := func(n int) (*jmxv1alpha1.PrometheusJmxExporter, int) {
		t.Helper()
		ex := c.exporter(t, ns, "orders")
		ex.Status = *operator.StatusOf(c.ctx, ex, podsOf(n))
		if _, err := c.jmx.JmxV1alpha1().PrometheusJmxExporters(ns).UpdateStatus(c.ctx, ex, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		raw, err := c.jmx.JmxV1alpha1().RESTClient().Get().Namespace(ns).Resource("prometheusjmxexporters").Name("orders").DoRaw(c.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got jmxv1alpha1.PrometheusJmxExporter
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		return &got, len(raw)
	}
	_, small := size(1000)
	got, large := size(10000)
	t.Logf("the exporter is %d bytes (JSON, as the API server returns it) with 10,000 pods, %d with 1,000", large, small)
	if large >= 256<<10 {
		t.Errorf("the exporter of 10,000 pods is %d bytes, not under 256 KiB", large)
	}
	if large-small > 64 {
		t.Errorf("the exporter grows with its pods: %d bytes with 1,000, %d with 10,000", small, large)
	}
	st := got.Status
	if st.MatchedPods != 10000 || st.InjectedPods != 7500 || st.FailedPods != 2500 || st.MetricsEndpointCount != 7500 || st.PortPendingPodCount != 2500 {
		t.Errorf("counts: matched %d, injected %d, failed %d, endpoints %d, port pending %d; want 10000, 7500, 2500, 7500, 2500",
			st.MatchedPods, st.InjectedPods, st.FailedPods, st.MetricsEndpointCount, st.PortPendingPodCount)
	}
	if len(st.MetricsEndpoints) != jmxv1alpha1.MaxStatusEndpoints || len(st.PortPendingPods) != jmxv1alpha1.MaxStatusEndpoints {
		t.Fatalf("%d endpoints and %d port-pending pods listed, want %d each", len(st.MetricsEndpoints), len(st.PortPendingPods), jmxv1alpha1.MaxStatusEndpoints)
	}
	// The sample is the first endpoints by pod name: pods 1, 2, 3, 5, 6, 7, ...
	for k, i := 0, 0; k < len(st.MetricsEndpoints); i++ {
		if i%4 == 0 {
			continue
		}
		if e := st.MetricsEndpoints[k]; e.Pod != name(i) {
			t.Fatalf("sample entry %d is pod %s, want %s", k, e.Pod, name(i))
		}
		k++
	}
	if st.PortPendingPods[0] != name(1) || st.PortPendingPods[99] != name(397) {
		t.Errorf("port-pending sample from %s to %s, want %s to %s", st.PortPendingPods[0], st.PortPendingPods[99], name(1), name(397))
	}
	for _, cond := range st.Conditions {
		t.Logf("%s=%s %s: %d bytes", cond.Type, cond.Status, cond.Reason, len(cond.Message))
	}
}

// TestTheOperatorKeepsTheExporterOf10000PodsSmall is
// TestAnExporterOf10000PodsStaysSmall with everything real: 10,000 pod
// objects that carry the records the operator writes (one JVM each,
// injected an hour ago under the exporter's generation and config), the
// operator, and an exporter that selects them all. Its status counts every
// JVM and lists a sample of MaxStatusEndpoints, the first by pod name; the
// object the API server returns is under 256 KiB. It creates 20,000 objects
// (about two minutes on two busy cores), so it runs only with
// HANDLERKIT_SCALE_TESTS=1; make bench-operator measures the same at scale.
func TestTheOperatorKeepsTheExporterOf10000PodsSmall(t *testing.T) {
	if os.Getenv("HANDLERKIT_SCALE_TESTS") == "" {
		t.Skip("set HANDLERKIT_SCALE_TESTS=1 to create 10,000 pods")
	}
	t.Parallel()
	c := newCluster(t, 10*time.Minute)
	ns := c.namespace(t, "tenk")
	labels := map[string]string{"app": "orders"}
	const pods = 10000
	sum := sha256.Sum256([]byte(jmxv1alpha1.DefaultExporterConfig))
	hash := hex.EncodeToString(sum[:])[:16]
	injected := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	name := func(i int) string { return fmt.Sprintf("orders-7d9c5f6b8d-%05d", i) }
	containerID := func(i int) string {
		id := sha256.Sum256([]byte(name(i)))
		return "containerd://" + hex.EncodeToString(id[:])
	}
	start := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := c.createRecordedPod(ns, name(i), labels, containerID(i), fmt.Sprintf("10.%d.%d.%d", 1+i/65536, i/256%256, i%256),
					operator.ContainerRecord{ContainerID: containerID(i), Port: jmxv1alpha1.DefaultPort, ConfigHash: hash, Generation: 1,
						InjectedAt: &injected, JVMs: []operator.JVMRecord{{PID: 7, Main: "org.springframework.boot.loader.launch.JarLauncher",
							Port: jmxv1alpha1.DefaultPort, StartedAt: &injected}}}); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
	for i := 0; i < pods; i++ {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			wg.Wait()
			t.Fatal(err)
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	t.Logf("%d pods created and running in %s", pods, time.Since(start).Round(time.Second))

	calls := &apiCalls{}
	c.wrap = calls.wrap
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) { return loaded(r, ""), nil })
	c.runOperator(t, ns, operator.Options{Resync: time.Minute,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}})
	start = time.Now()
	c.createExporter(t, ns, "orders", labels)
	var ex *jmxv1alpha1.PrometheusJmxExporter
	waitUntil(t, 5*time.Minute, "the status of 10,000 injected pods", func() (bool, string) {
		ex = c.exporter(t, ns, "orders")
		ready := meta.FindStatusCondition(ex.Status.Conditions, jmxv1alpha1.ConditionReady)
		return ex.Status.MetricsEndpointCount == pods && ex.Status.InjectedPods == pods && ready != nil && ready.Status == metav1.ConditionTrue,
			fmt.Sprintf("matched %d, injected %d, endpoints %d", ex.Status.MatchedPods, ex.Status.InjectedPods, ex.Status.MetricsEndpointCount)
	})
	writes, _ := calls.writes()
	t.Logf("status of %d pods written in %s; the operator's writes:%s", pods, time.Since(start).Round(time.Second), table(writes))
	if n := s.count(func(call) bool { return true }); n != 0 {
		t.Errorf("%d injections into pods whose records say they are injected", n)
	}
	raw, err := c.jmx.JmxV1alpha1().RESTClient().Get().Namespace(ns).Resource("prometheusjmxexporters").Name("orders").DoRaw(c.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the exporter of %d pods is %d bytes as the API server returns it (JSON)", pods, len(raw))
	if len(raw) >= 256<<10 {
		t.Errorf("the exporter is %d bytes, not under 256 KiB", len(raw))
	}
	eps := ex.Status.MetricsEndpoints
	if len(eps) != jmxv1alpha1.MaxStatusEndpoints {
		t.Fatalf("%d endpoints in the sample, want %d", len(eps), jmxv1alpha1.MaxStatusEndpoints)
	}
	for i, e := range eps {
		if e.Pod != name(i) || e.Port != jmxv1alpha1.DefaultPort || e.ContainerID != containerID(i) {
			t.Errorf("sample entry %d: %s:%d (%s), want the %dth pod by name, %s", i, e.Pod, e.Port, e.ContainerID, i, name(i))
			break
		}
	}
	for _, cond := range ex.Status.Conditions {
		if len(cond.Message) > 1024 {
			t.Errorf("condition %s's message is %d bytes", cond.Type, len(cond.Message))
		}
	}
}

// recordedPod is a running pod, with one container app as start id, that
// carries the operator's record rec for it.
func recordedPod(name string, labels map[string]string, id, ip string, rec operator.ContainerRecord) *corev1.Pod {
	raw, _ := json.Marshal(operator.PodRecord{Exporter: "orders", Containers: map[string]operator.ContainerRecord{"app": rec}}) // plain data: never fails
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{operator.AnnotationAgents: string(raw)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "jvm-app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: id,
			Ready: true, Image: "jvm-app", ImageID: "sha256:1",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now().Add(-2 * time.Hour))}}}}}}
}

// createRecordedPod creates recordedPod's pod.
func (c *cluster) createRecordedPod(ns, name string, labels map[string]string, id, ip string, rec operator.ContainerRecord) error {
	pod := recordedPod(name, labels, id, ip, rec)
	status := pod.Status
	for try := 0; ; try++ {
		created, err := c.kube.CoreV1().Pods(ns).Create(c.ctx, pod, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			created, err = c.kube.CoreV1().Pods(ns).Get(c.ctx, name, metav1.GetOptions{})
		}
		if err != nil {
			if try < 5 && (apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) || apierrors.IsTimeout(err)) {
				continue
			}
			return err
		}
		created.Status.Phase, created.Status.PodIP, created.Status.ContainerStatuses = status.Phase, status.PodIP, status.ContainerStatuses
		_, err = c.kube.CoreV1().Pods(ns).UpdateStatus(c.ctx, created, metav1.UpdateOptions{})
		if err == nil {
			return nil
		}
		if try >= 5 || !apierrors.IsConflict(err) && !apierrors.IsServerTimeout(err) && !apierrors.IsTooManyRequests(err) {
			return err
		}
	}
}
