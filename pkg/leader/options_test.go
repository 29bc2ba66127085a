package leader_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/handlerkit/handlerkit/pkg/leader"
)

func TestConstructorsRejectBadInput(t *testing.T) {
	reg := func() leader.Option { return leader.WithRegisterer(prometheus.NewRegistry()) }
	cases := []struct {
		name    string
		lease   bool
		lock    string
		opts    []leader.Option
		wantErr string
	}{
		{"invalid lock name", false, "Not_A_Name", nil, "invalid lock name"},
		{"invalid lease name", true, "Not_A_Name", nil, "invalid lease name"},
		{"invalid label key", false, "lock", []leader.Option{leader.WithLeaderLabel("bad key!", "true")}, "invalid leader label"},
		{"invalid label value", false, "lock", []leader.Option{leader.WithLeaderLabel("leader", "not valid!")}, "invalid leader label"},
		{"empty selector", false, "lock", []leader.Option{leader.WithPodSelector("")}, "must not be empty"},
		{"unparsable selector", false, "lock", []leader.Option{leader.WithPodSelector("a in (")}, "invalid pod selector"},
		{"nil registerer", false, "lock", []leader.Option{leader.WithRegisterer(nil)}, "nil registerer"},
		{"nil logger", false, "lock", []leader.Option{leader.WithLogger(nil)}, "nil logger"},
		{"zero backoff", false, "lock", []leader.Option{leader.WithBackoff(wait.Backoff{})}, "backoff duration"},
		{"zero label interval", false, "lock", []leader.Option{leader.WithLabelInterval(0)}, "label interval"},
		{"renew deadline not below lease duration", true, "lock",
			[]leader.Option{leader.WithLeaseDurations(time.Second, time.Second, 100*time.Millisecond)}, "lease durations"},
		{"retry period not below renew deadline", true, "lock",
			[]leader.Option{leader.WithLeaseDurations(3*time.Second, time.Second, time.Second)}, "lease durations"},
		{"renew deadline within client-go's retry jitter", true, "lock",
			[]leader.Option{leader.WithLeaseDurations(3*time.Second, 1100*time.Millisecond, time.Second)}, "lease durations"},
		{"lease without namespace", true, "lock", []leader.Option{leader.WithNamespace("")}, "needs a namespace"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]leader.Option{leader.WithNamespace("ns"), reg()}, tc.opts...)
			var err error
			if tc.lease {
				_, err = leader.NewLease(env.Config(), tc.lock, opts...)
			} else {
				_, err = leader.NewForLife(env.Config(), tc.lock, opts...)
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
	if _, err := leader.NewForLife(nil, "lock", reg()); err == nil {
		t.Error("NewForLife(nil config) succeeded")
	}
	if _, err := leader.NewLease(nil, "lock", reg()); err == nil {
		t.Error("NewLease(nil config) succeeded")
	}
}

func TestElectorsShareOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := []leader.Option{leader.WithNamespace("ns"), leader.WithRegisterer(reg)}
	if _, err := leader.NewForLife(env.Config(), "one", opts...); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.NewLease(env.Config(), "two", opts...); err != nil {
		t.Fatalf("a second elector on the same registry: %v", err)
	}
	for _, name := range []string{"one", "two"} {
		if got := masterStatus(t, reg, name); got != 0 {
			t.Errorf("leader_election_master_status{name=%q} = %v, want 0 before leading", name, got)
		}
	}
}
