package leader_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/handlerkit/handlerkit/pkg/leader"
)

// failoverRound starts a leader and a stand-by, lets the stand-by wait for standby, stops the leader with stop,
// and returns how long the stand-by took to lead and how long until the label had moved to it.
func failoverRound(b *testing.B, standby time.Duration, newElector func(ns, pod string) elector,
	stop func(ns string, r *replica)) (lead, label time.Duration) {
	ns := newNamespace(b)
	createPod(b, ns, "op-a", operatorLabels)
	createPod(b, ns, "op-b", operatorLabels)
	a := startReplica(b, "op-a", newElector(ns, "op-a"))
	eventually(b, 30*time.Second, "op-a leads", a.leading)
	eventually(b, 30*time.Second, "op-a labelled", onlyLabelled(b, ns, "op-a"))
	r := startReplica(b, "op-b", newElector(ns, "op-b"))
	time.Sleep(standby) // deliberate: the benchmark's parameter, how long the stand-by has waited before the failover
	if r.leading() {
		b.Fatal("op-b leads before the leader stopped")
	}

	b.StartTimer()
	start := time.Now()
	stop(ns, a)
	for !r.leading() {
		time.Sleep(5 * time.Millisecond)
		if time.Since(start) > time.Minute {
			b.Fatal("no failover within a minute")
		}
	}
	lead = time.Since(start)
	b.StopTimer()
	eventually(b, 30*time.Second, "label moved", onlyLabelled(b, ns, "op-b"))
	label = time.Since(start)
	a.cancel()
	r.cancel()
	return lead, label
}

func reportFailover(b *testing.B, lead, label time.Duration) {
	b.ReportMetric(lead.Seconds()/float64(b.N), "s/failover")
	b.ReportMetric(label.Seconds()/float64(b.N), "s/label-moved")
	b.ReportMetric(0, "ns/op") // wall time per op includes setup; the two metrics above are the figures
}

// BenchmarkFailoverForLife measures leader-for-life takeover with the default backoff (1s x1.5 up to 15s,
// jittered): the stand-by has waited 3s when the leader's process crashes (no Release) and its pod is marked
// Failed; its watch on the holder's pod wakes it before the backoff step ends. A clean shutdown deletes the lock
// and is faster still.
func BenchmarkFailoverForLife(b *testing.B) {
	var lead, label time.Duration
	b.StopTimer()
	for range b.N {
		l, lm := failoverRound(b, 3*time.Second, func(ns, pod string) elector {
			return newForLife(b, ns, pod, nil, leader.WithBackoff(leader.DefaultBackoff()), leader.WithLabelInterval(leader.DefaultLabelInterval))
		}, func(ns string, r *replica) {
			r.crash()
			setPodStatus(b, ns, r.name, corev1.PodFailed, "")
		})
		lead += l
		label += lm
	}
	reportFailover(b, lead, label)
}

// BenchmarkFailoverLease measures lease takeover when the leader's context is cancelled (a clean shutdown, which
// releases the lease), with the short test timings (lease 2s, renew deadline 1.5s, retry 200ms) and with the
// defaults (15s, 10s, 2s). A leader that crashes without releasing is replaced only after the lease duration.
func BenchmarkFailoverLease(b *testing.B) {
	timings := []struct {
		name                 string
		lease, renew, period time.Duration
	}{
		{"short", testLeaseDuration, testRenewDeadline, testRetryPeriod},
		{"default", leader.DefaultLeaseDuration, leader.DefaultRenewDeadline, leader.DefaultRetryPeriod},
	}
	for _, tm := range timings {
		b.Run(tm.name, func(b *testing.B) {
			var lead, label time.Duration
			b.StopTimer()
			for range b.N {
				l, lm := failoverRound(b, 2*tm.period, func(ns, pod string) elector {
					return newLease(b, ns, pod, nil, leader.WithLeaseDurations(tm.lease, tm.renew, tm.period),
						leader.WithLabelInterval(leader.DefaultLabelInterval))
				}, func(ns string, r *replica) { r.cancel() })
				lead += l
				label += lm
			}
			reportFailover(b, lead, label)
		})
	}
}
