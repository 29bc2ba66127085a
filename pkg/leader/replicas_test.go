package leader_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/leader"
	"github.com/handlerkit/handlerkit/pkg/metrics"
	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// operatorReplica is one replica of an operator built on pkg/sdk, running in a goroutine with its own pod
// object, registry and metrics server.
type operatorReplica struct {
	pod     string
	op      *sdk.Operator
	cancel  context.CancelFunc
	done    chan struct{}
	runErr  error
	handled atomic.Int64 // events this replica's handler saw
}

func startOperator(t *testing.T, ns, pod string, electorFor func(reg prometheus.Registerer) sdk.Elector) *operatorReplica {
	t.Helper()
	return startOperatorWith(t, ns, pod, electorFor, nil)
}

// startOperatorWith starts a replica whose ConfigMap watch calls handler (after counting the event), with opts
// added to the Operator's options.
func startOperatorWith(t *testing.T, ns, pod string, electorFor func(reg prometheus.Registerer) sdk.Elector,
	handler sdk.Handler, opts ...sdk.Option) *operatorReplica {
	t.Helper()
	reg := prometheus.NewRegistry()
	r := &operatorReplica{pod: pod, done: make(chan struct{})}
	base := []sdk.Option{
		sdk.WithElector(electorFor(reg)),
		sdk.WithMetricsAddr("127.0.0.1:0"),
		sdk.WithRegisterer(reg),
		sdk.WithGatherer(reg),
		sdk.WithLogger(testLogger(t).WithField("replica", pod)),
	}
	op, err := sdk.New(env.Config(), append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Watch("v1", "ConfigMap", ns, 0); err != nil {
		t.Fatal(err)
	}
	op.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		r.handled.Add(1)
		if handler != nil {
			return handler.Handle(ctx, e)
		}
		return nil
	}))
	r.op = op
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		r.runErr = op.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// get fetches path from the replica's metrics server; it fails the test on any transport error, which is the
// "connection refused" the issue is about.
func (r *operatorReplica) get(t *testing.T, path string) (int, string) {
	t.Helper()
	addr := r.op.MetricsAddr()
	if addr == "" {
		t.Fatalf("%s: the metrics server is not bound", r.pod)
	}
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("%s: GET %s: %v", r.pod, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// scrapedStatus reads leader_election_master_status for name from the replica's /metrics over HTTP.
func (r *operatorReplica) scrapedStatus(t *testing.T, name string) string {
	t.Helper()
	code, body := r.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("%s: /metrics = %d", r.pod, code)
	}
	prefix := fmt.Sprintf("leader_election_master_status{name=%q} ", name)
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return v
		}
	}
	return ""
}

// gatheredStatus reads leader_election_master_status for name from the
// replica's registry, at once and without HTTP, for use outside the test's
// goroutine: it returns the value, or what went wrong.
func (r *operatorReplica) gatheredStatus(name string) string {
	mfs, err := r.op.Gatherer().Gather()
	if err != nil {
		return err.Error()
	}
	for _, mf := range mfs {
		if mf.GetName() != "leader_election_master_status" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == name {
					return strconv.FormatFloat(m.GetGauge().GetValue(), 'g', -1, 64)
				}
			}
		}
	}
	return "no leader_election_master_status series"
}

func scrapedLeaders(t *testing.T, rs []*operatorReplica, name string) []*operatorReplica {
	var out []*operatorReplica
	for _, r := range rs {
		if r.scrapedStatus(t, name) == "1" {
			out = append(out, r)
		}
	}
	return out
}

type electionMode struct {
	name    string
	lock    string
	elector func(t *testing.T, ns, pod string, reg prometheus.Registerer) sdk.Elector
	// stopLeader ends the leader the way the mode expects: its process (and, for leader-for-life, its pod).
	stopLeader func(t *testing.T, ns string, r *operatorReplica)
}

var electionModes = []electionMode{
	{
		name: "leader-for-life",
		lock: lockName,
		elector: func(t *testing.T, ns, pod string, reg prometheus.Registerer) sdk.Elector {
			f, err := leader.NewForLife(env.Config(), lockName, leader.WithNamespace(ns), leader.WithPodName(pod),
				leader.WithRegisterer(reg), leader.WithBackoff(fastBackoff), leader.WithLabelInterval(time.Second),
				leader.WithLogger(testLogger(t).WithField("replica", pod)))
			if err != nil {
				t.Fatal(err)
			}
			return f
		},
		stopLeader: func(t *testing.T, ns string, r *operatorReplica) {
			r.cancel()
			<-r.done
			setPodStatus(t, ns, r.pod, corev1.PodFailed, "")
		},
	},
	{
		name: "lease",
		lock: leaseName,
		elector: func(t *testing.T, ns, pod string, reg prometheus.Registerer) sdk.Elector {
			l, err := leader.NewLease(env.Config(), leaseName, leader.WithNamespace(ns), leader.WithPodName(pod),
				leader.WithRegisterer(reg), leader.WithLeaseDurations(testLeaseDuration, testRenewDeadline, testRetryPeriod),
				leader.WithLabelInterval(time.Second), leader.WithLogger(testLogger(t).WithField("replica", pod)))
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		stopLeader: func(t *testing.T, ns string, r *operatorReplica) {
			r.cancel()
			<-r.done
		},
	},
}

func TestThreeReplicasOneLeaderAllServeMetricsAndFailover(t *testing.T) {
	for _, mode := range electionModes {
		t.Run(mode.name, func(t *testing.T) {
			ns := newNamespace(t)
			var rs []*operatorReplica
			for i := range 3 {
				pod := fmt.Sprintf("op-%d", i)
				createPod(t, ns, pod, operatorLabels)
				rs = append(rs, startOperator(t, ns, pod, func(reg prometheus.Registerer) sdk.Elector {
					return mode.elector(t, ns, pod, reg)
				}))
			}

			// Every replica answers /metrics and /healthz as soon as its server is bound, leader or not.
			for _, r := range rs {
				eventually(t, 30*time.Second, r.pod+" binds its metrics server", func() bool { return r.op.MetricsAddr() != "" })
				for _, path := range []string{"/metrics", "/healthz"} {
					if code, body := r.get(t, path); code != http.StatusOK {
						t.Errorf("%s %s = %d %s", r.pod, path, code, body)
					}
				}
			}

			eventually(t, 30*time.Second, "exactly one replica reports leader_election_master_status 1", func() bool {
				return len(scrapedLeaders(t, rs, mode.lock)) == 1
			})
			first := scrapedLeaders(t, rs, mode.lock)[0]
			eventually(t, 30*time.Second, "only the leader's pod is labelled", onlyLabelled(t, ns, first.pod))
			for _, r := range rs {
				if got := r.scrapedStatus(t, mode.lock); r != first && got != "0" {
					t.Errorf("%s: master status %q, want 0", r.pod, got)
				}
				// Stand-by replicas are ready: they are where they should be.
				eventually(t, 30*time.Second, r.pod+" is ready", func() bool {
					code, _ := r.get(t, "/readyz")
					return code == http.StatusOK
				})
			}

			// Every replica ensures the Service at start, concurrently, as a Deployment's pods would.
			var wg sync.WaitGroup
			errs := make(chan error, len(rs))
			for _, r := range rs {
				wg.Go(func() {
					_, err := metrics.EnsureService(context.Background(), env.Config(), metrics.ServiceOptions{
						OperatorName: "test-operator", Namespace: ns, PodName: r.pod, ScrapeOnlyLeader: true,
						Logger: testLogger(t),
					})
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("EnsureService: %v", err)
				}
			}
			svc, err := env.Clientset().CoreV1().Services(ns).Get(context.Background(), "test-operator-metrics", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if svc.Spec.Selector[leader.DefaultLabelKey] != leader.DefaultLabelValue || svc.Spec.Selector["app"] != "test-operator" {
				t.Errorf("Service selector = %v, want app=test-operator and leader=true", svc.Spec.Selector)
			}

			// Only the leader handles events.
			before := map[*operatorReplica]int64{}
			for _, r := range rs {
				before[r] = r.handled.Load()
			}
			if _, err := env.Clientset().CoreV1().ConfigMaps(ns).Create(context.Background(),
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "work"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, "the leader handles the new ConfigMap", func() bool {
				return first.handled.Load() > before[first]
			})
			for _, r := range rs {
				if r != first && r.handled.Load() != 0 {
					t.Errorf("%s handled %d events while standing by", r.pod, r.handled.Load())
				}
			}

			// The leader goes away; another replica takes over and the label follows.
			mode.stopLeader(t, ns, first)
			if first.runErr != nil {
				t.Errorf("the stopped leader's Run returned %v, want nil", first.runErr)
			}
			rest := []*operatorReplica{}
			for _, r := range rs {
				if r != first {
					rest = append(rest, r)
				}
			}
			eventually(t, 30*time.Second, "another replica leads", func() bool { return len(scrapedLeaders(t, rest, mode.lock)) == 1 })
			second := scrapedLeaders(t, rest, mode.lock)[0]
			eventually(t, 30*time.Second, "the label moves to the new leader", onlyLabelled(t, ns, second.pod))
			eventually(t, 30*time.Second, "the new leader handles events", func() bool { return second.handled.Load() > 0 })
		})
	}
}

func TestLeaseLossStopsTheOperatorWithErrLeadershipLost(t *testing.T) {
	ns := newNamespace(t)
	createPod(t, ns, "op-a", operatorLabels)
	r := startOperator(t, ns, "op-a", func(reg prometheus.Registerer) sdk.Elector {
		return electionModes[1].elector(t, ns, "op-a", reg)
	})
	eventually(t, 30*time.Second, "op-a leads", func() bool {
		return r.op.MetricsAddr() != "" && r.scrapedStatus(t, leaseName) == "1"
	})
	stealLease(t, ns)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the lease was lost")
	}
	if !errors.Is(r.runErr, sdk.ErrLeadershipLost) {
		t.Fatalf("Run = %v, want ErrLeadershipLost", r.runErr)
	}
	eventually(t, 30*time.Second, "op-a's label is removed", func() bool { return len(labelledPods(t, ns)) == 0 })
}
