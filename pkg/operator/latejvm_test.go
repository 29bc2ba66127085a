package operator

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

// TestLateLooksDoubleUpToAnHour: the documented schedule with the default
// interval (10m, 20m, 40m, then hourly), an interval longer than the cap,
// and a record of an earlier release, which has no looks: its one look
// ended --jvm-wait after the container started.
func TestLateLooksDoubleUpToAnHour(t *testing.T) {
	r := &Reconciler{opts: Options{}.withDefaults()}
	want := []time.Duration{10 * time.Minute, 20 * time.Minute, 40 * time.Minute, time.Hour, time.Hour}
	for i, w := range want {
		if got := r.lookDelay(i + 1); got != w {
			t.Errorf("after look %d: %s, want %s", i+1, got, w)
		}
	}
	long := &Reconciler{opts: Options{LateJVMInterval: 2 * time.Hour}.withDefaults()}
	if got := long.lookDelay(3); got != 2*time.Hour {
		t.Errorf("an interval over the cap: %s, want 2h", got)
	}

	started := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	cs := corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}}
	at, ok := r.nextLook(ContainerRecord{NoJVM: true}, cs)
	if !ok || !at.Equal(started.Add(DefaultJVMWait+DefaultLateJVMInterval)) {
		t.Errorf("an earlier release's record: next look %s %v, want %s", at, ok, started.Add(DefaultJVMWait+DefaultLateJVMInterval))
	}
	next := metav1.NewTime(started.Add(time.Hour))
	if at, ok := r.nextLook(ContainerRecord{NoJVM: true, Looks: 2, NextLookAt: &next}, cs); !ok || !at.Equal(next.Time) {
		t.Errorf("next look %s %v, want the record's", at, ok)
	}
	if _, ok := r.nextLook(ContainerRecord{NoJVM: true, Looks: 4, LooksEnded: "budget"}, cs); ok {
		t.Error("a record whose looks ended is looked at again")
	}
	if _, ok := r.nextLook(ContainerRecord{JVMs: []JVMRecord{{PID: 1}}}, cs); ok {
		t.Error("a container with a JVM is looked at again")
	}
	j := &job{spec: r.defaulted(jmxv1alpha1.PrometheusJmxExporterSpec{})}
	if c := r.noJVMRecord(j, cs, maxLateLooks, ""); c.NextLookAt == nil || c.LooksEnded != "" {
		t.Errorf("look %d: %+v, want a next look", maxLateLooks, c)
	}
	if c := r.noJVMRecord(j, cs, maxLateLooks+1, ""); c.NextLookAt != nil || c.LooksEnded == "" {
		t.Errorf("look %d (the last late one): %+v, want no next look and why", maxLateLooks+1, c)
	}
	off := &Reconciler{opts: Options{LateJVMInterval: -1}.withDefaults()}
	if _, ok := off.nextLook(ContainerRecord{NoJVM: true, Looks: 1, NextLookAt: &next}, cs); ok {
		t.Error("late looks turned off, yet one is planned")
	}
}

// TestRetriesAreKeptPerPodAndPruned: the backoff of transient failures is
// kept per container start, dropped with its pod, and dropped for a
// container's earlier starts at the pod's next plan.
func TestRetriesAreKeptPerPodAndPruned(t *testing.T) {
	r := newRetries()
	a := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-a"}}
	b := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-b"}}
	if d := r.failed(retryKey(a, "app", "id1")); d != 2*time.Second {
		t.Errorf("first backoff %s, want 2s", d)
	}
	if d := r.failed(retryKey(a, "app", "id1")); d != 4*time.Second {
		t.Errorf("second backoff %s, want 4s", d)
	}
	r.failed(retryKey(a, "side", "id2"))
	r.failed(retryKey(b, "app", "id3"))
	if r.wait(retryKey(a, "app", "id1")) <= 0 || r.pods() != 2 {
		t.Fatalf("wait %s, %d pods", r.wait(retryKey(a, "app", "id1")), r.pods())
	}
	// Pod a's app restarted (id4); side still runs id2.
	r.keepOnly(a, []corev1.ContainerStatus{{Name: "app", ContainerID: "id4"}, {Name: "side", ContainerID: "id2"}})
	if r.wait(retryKey(a, "app", "id1")) != 0 || r.wait(retryKey(a, "side", "id2")) <= 0 {
		t.Error("keepOnly kept an earlier start or dropped the current one")
	}
	r.forget(retryKey(a, "side", "id2"))
	if r.hasPod("uid-a") {
		t.Error("a pod without entries is kept")
	}
	r.forgetPod("uid-b")
	if r.pods() != 0 {
		t.Errorf("%d pods left", r.pods())
	}
}
