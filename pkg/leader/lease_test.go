package leader_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/leader"
)

const leaseName = "test-operator-lease"

// Short lease timings keep the tests quick; production uses 15s/10s/2s. The renew deadline leaves room for a
// loaded 2-core machine, where a renewal can take more than a second.
const (
	testLeaseDuration = 4 * time.Second
	testRenewDeadline = 3 * time.Second
	testRetryPeriod   = 300 * time.Millisecond
)

func newLease(t testing.TB, ns, pod string, reg *prometheus.Registry, opts ...leader.Option) *leader.Lease {
	t.Helper()
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	base := []leader.Option{
		leader.WithNamespace(ns), leader.WithPodName(pod), leader.WithRegisterer(reg),
		leader.WithLeaseDurations(testLeaseDuration, testRenewDeadline, testRetryPeriod),
		leader.WithLabelInterval(500 * time.Millisecond), leader.WithLogger(testLogger(t)),
	}
	l, err := leader.NewLease(env.Config(), leaseName, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLeaseFailoverWhenLeaderContextIsCancelled(t *testing.T) {
	ns := newNamespace(t)
	rs, regs := startReplicas(t, ns, 3, func(name string, reg *prometheus.Registry) elector {
		return newLease(t, ns, name, reg)
	})
	eventually(t, 30*time.Second, "one replica leads", func() bool { return len(leaders(rs)) == 1 })
	first := leaders(rs)[0]
	eventually(t, 30*time.Second, "only the leader is labelled", onlyLabelled(t, ns, first.name))
	if got := masterStatus(t, regs[first.name], leaseName); got != 1 {
		t.Errorf("leader master status = %v, want 1", got)
	}

	first.cancel()
	select {
	case <-first.leadCtx.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the lead context did not end after cancel")
	}
	eventually(t, 30*time.Second, "another replica leads", func() bool {
		l := leaders(rs)
		return len(l) == 2 // the cancelled one still counts: its Lead returned leadership earlier
	})
	var second *replica
	for _, r := range leaders(rs) {
		if r != first {
			second = r
		}
	}
	eventually(t, 30*time.Second, "the label moves", onlyLabelled(t, ns, second.name))
	eventually(t, 10*time.Second, "old leader's status drops to 0", func() bool {
		return masterStatus(t, regs[first.name], leaseName) == 0
	})
	if got := masterStatus(t, regs[second.name], leaseName); got != 1 {
		t.Errorf("new leader master status = %v, want 1", got)
	}
}

func TestLeaseLossEndsLeadContextAndRemovesOwnLabel(t *testing.T) {
	ns := newNamespace(t)
	createPod(t, ns, "op-a", operatorLabels)
	reg := prometheus.NewRegistry()
	a := startReplica(t, "op-a", newLease(t, ns, "op-a", reg))
	eventually(t, 30*time.Second, "op-a leads", a.leading)
	eventually(t, 30*time.Second, "op-a labelled", onlyLabelled(t, ns, "op-a"))

	// Someone else takes the lease over behind op-a's back, as after a network partition: op-a's renewals now fail.
	stealLease(t, ns)

	select {
	case <-a.leadCtx.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the lead context did not end after the lease was lost")
	}
	eventually(t, 30*time.Second, "op-a's label is removed", func() bool { return len(labelledPods(t, ns)) == 0 })
	eventually(t, 10*time.Second, "status drops to 0", func() bool { return masterStatus(t, reg, leaseName) == 0 })
}

// stealLease makes an intruder take the lease in ns over, again and again until the test ends, as after a network
// partition: the holder's renewals fail from now on.
func stealLease(t *testing.T, ns string) {
	t.Helper()
	ctx := testContext(t)
	leases := env.Clientset().CoordinationV1().Leases(ns)
	go func() {
		for ctx.Err() == nil {
			if lease, err := leases.Get(ctx, leaseName, metav1.GetOptions{}); err == nil {
				intruder := "intruder"
				now := metav1.NewMicroTime(time.Now())
				lease.Spec.HolderIdentity, lease.Spec.RenewTime = &intruder, &now
				_, _ = leases.Update(ctx, lease, metav1.UpdateOptions{})
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}
