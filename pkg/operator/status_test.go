package operator

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

func TestEndpointSampleIsTheFirstByPodThenPort(t *testing.T) {
	var all []jmxv1alpha1.MetricsEndpoint
	for i := 0; i < 120; i++ {
		for _, port := range []int32{9405, 9404} {
			all = append(all, jmxv1alpha1.MetricsEndpoint{Pod: fmt.Sprintf("pod-%03d", i), Port: port, ContainerID: fmt.Sprint(i)})
		}
	}
	for run := 0; run < 3; run++ {
		shuffled := append([]jmxv1alpha1.MetricsEndpoint(nil), all...)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		sample, n := endpointSample(shuffled)
		if n != 240 || len(sample) != jmxv1alpha1.MaxStatusEndpoints {
			t.Fatalf("sample of %d, count %d; want %d of 240", len(sample), n, jmxv1alpha1.MaxStatusEndpoints)
		}
		for k, e := range sample {
			if want := fmt.Sprintf("pod-%03d", k/2); e.Pod != want || e.Port != 9404+int32(k%2) {
				t.Fatalf("run %d: entry %d is %s:%d, want %s:%d", run, k, e.Pod, e.Port, want, 9404+k%2)
			}
		}
		if cap(sample) != len(sample) {
			t.Errorf("the sample can grow into the endpoints it left out (cap %d)", cap(sample))
		}
	}
	few, n := endpointSample(all[:7])
	if len(few) != 7 || n != 7 {
		t.Errorf("7 endpoints gave a sample of %d, count %d", len(few), n)
	}
	if none, n := endpointSample(nil); none != nil || n != 0 {
		t.Errorf("no endpoints gave %v, %d", none, n)
	}
}

func TestNameSampleCapsAndCounts(t *testing.T) {
	var names []string
	for i := 250; i > 0; i-- {
		names = append(names, fmt.Sprintf("pod-%03d", i))
	}
	sample, n := nameSample(names)
	if n != 250 || len(sample) != jmxv1alpha1.MaxStatusEndpoints || sample[0] != "pod-001" || sample[99] != "pod-100" {
		t.Errorf("sample %d (%s to %s), count %d", len(sample), sample[0], sample[len(sample)-1], n)
	}
}

func TestChangeOfTellsWhatAUserReads(t *testing.T) {
	now := metav1.Now()
	base := func() *jmxv1alpha1.PrometheusJmxExporterStatus {
		return &jmxv1alpha1.PrometheusJmxExporterStatus{
			ObservedGeneration: 2, MatchedPods: 2, InjectedPods: 2, MetricsEndpointCount: 2,
			Conditions: []metav1.Condition{
				{Type: jmxv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: jmxv1alpha1.ReasonAllInjected, Message: "2 JVMs in 2 pods serve metrics"},
				{Type: jmxv1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: jmxv1alpha1.ReasonAsExpected, Message: "nothing has failed"},
			},
			MetricsEndpoints: []jmxv1alpha1.MetricsEndpoint{
				{Pod: "a", Container: "app", Port: 9404, PodIP: "10.0.0.1", ContainerID: "containerd://a1", PID: 7, InjectedAt: now, JVMStartedAt: &now},
				{Pod: "b", Container: "app", Port: 9404, PodIP: "10.0.0.2", ContainerID: "containerd://b1", PID: 7, InjectedAt: now, JVMStartedAt: &now},
			},
		}
	}
	later := metav1.NewTime(now.Add(time.Minute))
	for _, tc := range []struct {
		name   string
		change func(st *jmxv1alpha1.PrometheusJmxExporterStatus)
		want   statusChange
	}{
		{"nothing", func(st *jmxv1alpha1.PrometheusJmxExporterStatus) {}, unchanged},
		{"a container restarted and was injected again", func(st *jmxv1alpha1.PrometheusJmxExporterStatus) {
			e := &st.MetricsEndpoints[1]
			e.ContainerID, e.PID, e.InjectedAt, e.JVMStartedAt = "containerd://b2", 8, later, &later
		}, sampleOnly},
		{"a count", func(st *jmxv1alpha1.PrometheusJmxExporterStatus) { st.InjectedPods = 1 }, coalesced},
		{"Ready turns", func(st *jmxv1alpha1.PrometheusJmxExporterStatus) {
			st.Conditions[0].Status, st.Conditions[0].Reason, st.Conditions[0].Message = metav1.ConditionFalse, jmxv1alpha1.ReasonInjectionPending, "waiting for b/app"
		}, coalesced},
		{"a message", func(st *jmxv1alpha1.PrometheusJmxExporterStatus) {
			st.Conditions[1].Message = "nothing at all has failed"
		}, coalesced},
		{"another pod in the sample", func(st *jmxv1alpha1.PrometheusJmxExporterStatus) { st.MetricsEndpoints[1].Pod = "c" }, coalesced},
		{"another port", func(st *jmxv1alpha1.PrometheusJmxExporterStatus) { st.MetricsEndpoints[1].Port = 9600 }, coalesced},
		{"Degraded turns", func(st *jmxv1alpha1.PrometheusJmxExporterStatus) {
			st.Conditions[1].Status, st.Conditions[1].Reason = metav1.ConditionTrue, jmxv1alpha1.ReasonInjectionFailed
		}, urgent},
		{"a condition appears", func(st *jmxv1alpha1.PrometheusJmxExporterStatus) {
			st.Conditions = append(st.Conditions, metav1.Condition{Type: jmxv1alpha1.ConditionConfigValid, Status: metav1.ConditionTrue})
		}, urgent},
		{"a new generation", func(st *jmxv1alpha1.PrometheusJmxExporterStatus) { st.ObservedGeneration = 3 }, urgent},
		{"the breaker opens", func(st *jmxv1alpha1.PrometheusJmxExporterStatus) {
			st.CircuitBreaker = &jmxv1alpha1.CircuitBreaker{Generation: 2, Pod: "a"}
		}, urgent},
		{"a rejected config", func(st *jmxv1alpha1.PrometheusJmxExporterStatus) {
			st.RejectedConfig = &jmxv1alpha1.RejectedConfig{ConfigSHA256: "ab"}
		}, urgent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, st := base(), base()
			tc.change(st)
			if got := changeOf(old, st); got != tc.want {
				t.Errorf("changeOf = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestStatusPacerWritesAChangeOnceItHasWaited(t *testing.T) {
	var s statusPacer
	s.delay = 5 * time.Second
	t0 := time.Now()
	if write, wait := s.due("ns/a", coalesced, t0); write || wait != 5*time.Second {
		t.Fatalf("first sight: write %v, wait %s; want a wait of the delay", write, wait)
	}
	// Seen again later: the wait counts from the first sight.
	if write, wait := s.due("ns/a", coalesced, t0.Add(3*time.Second)); write || wait != 2*time.Second {
		t.Fatalf("3s later: write %v, wait %s", write, wait)
	}
	if write, _ := s.due("ns/a", coalesced, t0.Add(5*time.Second)); !write {
		t.Fatal("not written once the delay passed")
	}
	s.wrote("ns/a", t0.Add(5*time.Second))
	// Another exporter, and urgent changes, wait for nothing.
	if write, _ := s.due("ns/b", urgent, t0); !write {
		t.Error("an urgent change waits")
	}
	// A change that goes away before its delay is never written.
	if write, _ := s.due("ns/a", coalesced, t0.Add(6*time.Second)); write {
		t.Fatal("written at first sight")
	}
	// A new container start recorded 2 s after the last write waits for
	// the rest of the delay after that write, and drops the wait of the
	// change that went away.
	if write, wait := s.due("ns/a", sampleOnly, t0.Add(7*time.Second)); write || wait != 3*time.Second {
		t.Errorf("a restart recorded 2s after a write: write %v, wait %s; want a wait of 3s", write, wait)
	}
	if write, _ := s.due("ns/a", sampleOnly, t0.Add(10*time.Second)); !write {
		t.Error("a restart recorded: not written once the delay after the last write passed")
	}
	s.wrote("ns/a", t0.Add(10*time.Second))
	if write, wait := s.due("ns/a", coalesced, t0.Add(16*time.Second)); write || wait != 5*time.Second {
		t.Errorf("the next change waits from its own first sight: write %v, wait %s", write, wait)
	}
	// A restart recorded long after the last write is written at once: the
	// status must not name a container that no longer runs.
	if write, wait := s.due("ns/c", sampleOnly, t0); !write || wait != 0 {
		t.Errorf("a restart recorded with no recent write: write %v, wait %s; want it written at once", write, wait)
	}
	if write, _ := s.due("ns/a", sampleOnly, t0.Add(time.Minute)); !write {
		t.Error("a restart recorded a minute after the last write: not written at once")
	}
}

// TestConditionMessagesDoNotGrowWithPods: each condition the plan can give
// names a bounded number of pods, containers and exporters, so that its
// message is as long with 10,000 as with 1,000 of them.
func TestConditionMessagesDoNotGrowWithPods(t *testing.T) {
	item := func(i int) string { return fmt.Sprintf("orders-7d9c5f6b8d-%05d/app", i) }
	list := func(n int, f func(int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	valid := condition(jmxv1alpha1.ConditionConfigValid, true, jmxv1alpha1.ReasonDefaultConfig, "default")
	for _, tc := range []struct {
		name string
		fill func(p *plan, counts map[string]int, n int)
	}{
		{"pending", func(p *plan, counts map[string]int, n int) {
			counts[podPending] = n
			p.pending = list(n, item)
			p.stale = list(n, item)
		}},
		{"failed", func(p *plan, counts map[string]int, n int) {
			counts[podFailed] = n
			p.failures = list(n, func(i int) string { return item(i) + ": AgentStartFailed: the agent failed" })
			p.refused = list(n, func(i int) string { return item(i) + ": ConfigRejected: no" })
		}},
		{"refusing attach", func(p *plan, counts map[string]int, n int) {
			counts[podFailed] = n
			p.failures = list(n, func(i int) string { return item(i) + ": AttachRefused: no" })
			p.attachRefused = list(n, item)
		}},
		{"conflicting", func(p *plan, counts map[string]int, n int) {
			counts[podConflict] = n
			for i := 0; i < n; i++ {
				other := fmt.Sprintf("exporter-%05d", i)
				p.conflicts[other] = []string{item(i)}
			}
		}},
		{"port pending", func(p *plan, counts map[string]int, n int) {
			counts[podInjected] = n
			p.portPending = list(n, item)
			p.atStartPortPending = list(n, item)
			p.atStartStale = list(n, item)
			p.endpoints = make([]jmxv1alpha1.MetricsEndpoint, n)
		}},
		{"not at start", func(p *plan, counts map[string]int, n int) {
			counts[podNotAtStart] = n
			p.notAtStart = list(n, item)
			p.notAtStartWhy = list(n, func(i int) string { return "pod " + item(i) + " (no JVM image)" })
		}},
		{"injected", func(p *plan, counts map[string]int, n int) {
			counts[podInjected] = n
			p.endpoints = make([]jmxv1alpha1.MetricsEndpoint, n)
			p.ownAnnotations = list(n, func(i int) string { return item(i) + " (prometheus.io/port)" })
			p.atStartNotes = list(n, item)
			p.notes = list(n, func(i int) string { return item(i) + ": httpServer changed" })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Reconciler
			length := map[int]map[string]int{}
			for _, n := range []int{1000, 10000} {
				p := &plan{verdict: verdict{configValid: valid}, conflicts: map[string][]string{}, matched: make([]*corev1.Pod, n)}
				counts := map[string]int{}
				tc.fill(p, counts, n)
				length[n] = map[string]int{}
				for _, c := range []metav1.Condition{r.readyCondition(p, counts), r.configAppliedCondition(p), r.degradedCondition(p, nil)} {
					length[n][c.Type+" "+c.Reason] = len(c.Message)
				}
			}
			for k, small := range length[1000] {
				if large := length[10000][k]; large > small+16 || large > 32<<10 {
					t.Errorf("%s: %d bytes with 1,000 pods, %d with 10,000", k, small, large)
				}
			}
		})
	}
}
