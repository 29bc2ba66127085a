package operator

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestAnExporterIsForgottenByDeletingItsOneEntry checks that everything the
// Reconciler keeps of an exporter (canary, refused status, restartOnRefusal's
// memory, the status pacer's pace) is one entry, that forgetting the
// exporter deletes it and leaves the others', and that an entry left empty
// goes by itself.
func TestAnExporterIsForgottenByDeletingItsOneEntry(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := &Reconciler{metrics: newMetrics(reg), conditions: newConditionMetric(reg)}
	r.pacer.memory = &r.memory
	now := time.Now()
	r.setCanary("ns/a", canaryJob{uid: "u1", pod: "p1"})
	r.memory.with("ns/a", func(m *exporterMemory) { m.refused = &refusal{fingerprint: "f", message: "m"} })
	r.evictionsOf("ns/a").skipped["u1"] = true
	r.pacer.wrote("ns/a", now)
	r.setCanary("ns/b", canaryJob{uid: "u2", pod: "p2"})
	if write, _ := r.pacer.due("ns/a", sampleOnly, now); write {
		t.Fatal("the pacer does not remember ns/a's last write")
	}
	if n := r.memory.size(); n != 2 {
		t.Fatalf("%d entries, want one per exporter (2)", n)
	}
	if !r.holdsPod("u1") {
		t.Fatal("restartOnRefusal's memory of ns/a does not hold its pod")
	}
	r.forgetExporter("ns", "a")
	if n := r.memory.size(); n != 1 || r.holdsPod("u1") {
		t.Fatalf("after forgetting ns/a: %d entries (want 1), holds its pod %v", n, r.holdsPod("u1"))
	}
	if write, _ := r.pacer.due("ns/a", sampleOnly, now); !write {
		t.Fatal("the pacer still remembers ns/a's last write")
	}
	r.clearCanary("ns/b", "other")
	if r.memory.size() != 1 {
		t.Fatal("another pod's end cleared ns/b's canary")
	}
	r.clearCanary("ns/b", "u2")
	if n := r.memory.size(); n != 0 {
		t.Fatalf("an entry left empty stays: %d entries", n)
	}
}
