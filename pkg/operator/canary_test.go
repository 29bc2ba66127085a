package operator_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// The canary (the one job that tries an exporter's change first) guards
// "a config the agent refuses reaches one JVM". These tests attack the two
// ways its verdict could be missed by the look that follows it.

// TestACanaryThatEndsWhileItsExporterIsLookedAtIsWaitedFor: pod a's job,
// the canary, ends after a look at the exporter has read the pods (a still
// busy, so no job for it, but jobs for b and c) and before that look gates
// the jobs. The look must not take the ended canary as a reason to start
// the next pod: it read the pods before a's verdict was written. Seen once
// in a full make test (pod b given the refused config 44 ms after pod a);
// here the hook makes that order certain.
func TestACanaryThatEndsWhileItsExporterIsLookedAtIsWaitedFor(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 4*time.Minute)
	ns := c.namespace(t, "canary-ends")
	labels := c.jvmPods(t, ns)
	aUID := string(c.pod(t, ns, "a").UID)
	c.configMap(t, ns, "cfg", unclosedGroup)
	release := make(chan struct{})
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) {
		if cl.pod == "a" {
			<-release
		}
		return refusedBy(jvm.ReasonConfigInvalid, collectorMessage), nil
	})
	var raced atomic.Bool
	var once sync.Once
	opts := operator.Options{Resync: time.Second, BreakerWindow: 3 * time.Second,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}}
	c.runOperatorWith(t, ns, opts, func(r *operator.Reconciler) {
		operator.SetBeforeGate(r, func(string) {
			// A look that read the pods while a's call is under way: let
			// the call answer and wait until a's job has ended.
			if !operator.PodBusy(r, aUID) || s.count(func(cl call) bool { return cl.pod == "a" }) != 1 {
				return
			}
			once.Do(func() {
				close(release)
				deadline := time.Now().Add(30 * time.Second)
				for operator.PodBusy(r, aUID) && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond) // polls a local map
				}
				raced.Store(!operator.PodBusy(r, aUID))
			})
		})
	})
	c.createExporter(t, ns, "orders", labels, withConfigMap("cfg"))

	cond := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionConfigValid, metav1.ConditionFalse, jmxv1alpha1.ReasonConfigInvalid)
	if !strings.Contains(cond.Message, "pod a") {
		t.Errorf("ConfigValid message %q does not name pod a", cond.Message)
	}
	if !raced.Load() {
		t.Fatal("no look at the exporter ran while pod a's job ended: the order under test did not happen")
	}
	hold(t, 10*time.Second, "only pod a given the refused config", func() (bool, string) {
		n := s.count(func(call) bool { return true })
		return n == 1, fmt.Sprintf("%d calls: %+v", n, s.all())
	})
}

// TestACanaryWhoseVerdictCannotBeRecordedKeepsTheChangeOnItsPod: the agent
// in pod a refuses the config, and the write of that verdict to a's record
// fails (the API server answers 500 once). Pod a goes on its backoff; the
// next pod must not be tried meanwhile: a alone is tried again, its verdict
// is recorded, and no other pod is ever given the config.
func TestACanaryWhoseVerdictCannotBeRecordedKeepsTheChangeOnItsPod(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 4*time.Minute)
	ns := c.namespace(t, "canary-unrecorded")
	labels := c.jvmPods(t, ns)
	c.configMap(t, ns, "cfg", unclosedGroup)
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) {
		return refusedBy(jvm.ReasonConfigInvalid, collectorMessage), nil
	})
	onA := func(cl call) bool { return cl.pod == "a" }
	// The operator's client fails the first patch of pod a made after a's
	// first call: the write of the verdict.
	var failed atomic.Bool
	cfg := rest.CopyConfig(c.env.Config())
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, "/namespaces/"+ns+"/pods/a") &&
				s.count(onA) == 1 && failed.CompareAndSwap(false, true) {
				body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected by the test","reason":"InternalError","code":500}`
				return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error",
					Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
			}
			return rt.RoundTrip(req)
		})
	})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts := operator.Options{Resync: time.Second, BreakerWindow: 3 * time.Second, Client: client,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}}
	c.runOperatorWith(t, ns, opts, nil)
	c.createExporter(t, ns, "orders", labels, withConfigMap("cfg"))

	cond := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionConfigValid, metav1.ConditionFalse, jmxv1alpha1.ReasonConfigInvalid)
	if !strings.Contains(cond.Message, "pod a") {
		t.Errorf("ConfigValid message %q does not name pod a", cond.Message)
	}
	if !failed.Load() {
		t.Fatal("the write of pod a's verdict was never failed: the case under test did not happen")
	}
	hold(t, 8*time.Second, "pod a tried twice, no other pod touched", func() (bool, string) {
		all := s.all()
		return len(all) == 2 && s.count(onA) == 2, fmt.Sprintf("%d calls: %+v", len(all), all)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestAProvenChangeIsNotTriedOnOneContainerAgain: once a JVM has run the
// exporter's spec and config for the breaker window, they are proven, and
// status.proven says so. When every JVM under them restarts (a rollout, a
// node drain), while the operator runs or while it is down, the new
// container starts are injected at once: nothing is held for the window.
// A change of the config is tried on one container first again, and the
// new config is proven in turn.
func TestAProvenChangeIsNotTriedOnOneContainerAgain(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 5*time.Minute)
	ns := c.namespace(t, "proven")
	labels := c.jvmPods(t, ns)
	first := "rules:\n- pattern: \".*\"\n"
	c.configMap(t, ns, "cfg", first)
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) { return loaded(r, ""), nil })
	// Long enough that three calls of one look never spread over it, short
	// enough for the test.
	const window = 10 * time.Second
	opts := operator.Options{Resync: time.Second, BreakerWindow: window,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}}
	stop := c.runOperator(t, ns, opts)
	c.createExporter(t, ns, "orders", labels, withConfigMap("cfg"))
	c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected)
	provenAs := func(config string) {
		t.Helper()
		waitUntil(t, 30*time.Second, "status.proven names the generation and the config", func() (bool, string) {
			ex := c.exporter(t, ns, "orders")
			pr := ex.Status.Proven
			return pr != nil && pr.Generation == ex.Generation && pr.ConfigSHA256 == sha256Hex(config) && !pr.ProvenAt.IsZero(),
				fmt.Sprintf("generation %d, proven %+v", ex.Generation, pr)
		})
	}
	provenAs(first)
	if calls := s.all(); len(calls) != 3 || calls[1].at.Sub(calls[0].at) < window {
		t.Fatalf("calls %+v: want pod a first, and b and c a window later", calls)
	}

	// restartAll restarts every container, a window after the last load
	// (a JVM that ends sooner opens the breaker), and returns the calls
	// made before.
	start := 1
	restartAll := func() int {
		t.Helper()
		calls := s.all()
		time.Sleep(time.Until(calls[len(calls)-1].at.Add(window + time.Second)))
		start++
		for _, name := range []string{"a", "b", "c"} {
			c.startContainer(t, ns, name, fmt.Sprintf("containerd://%s%d", name, start), &corev1.ContainerStateTerminated{
				ContainerID: fmt.Sprintf("containerd://%s%d", name, start-1), ExitCode: 143, Reason: "Error",
				StartedAt: metav1.Now(), FinishedAt: metav1.Now()})
		}
		return len(calls)
	}
	// injectedAtOnce waits for one call per pod after the first n, and
	// checks that none waited for another's window.
	injectedAtOnce := func(n int, what string) {
		t.Helper()
		waitUntil(t, time.Minute, what+": every new container start injected", func() (bool, string) {
			calls := s.all()
			return len(calls) == n+3, fmt.Sprintf("%d calls: %+v", len(calls), calls)
		})
		calls := s.all()[n:]
		pods := map[string]bool{}
		earliest, latest := calls[0].at, calls[0].at
		for _, cl := range calls {
			pods[cl.pod] = true
			if want := fmt.Sprintf("containerd://%s%d", cl.pod, start); cl.containerID != want {
				t.Errorf("%s: pod %s called for %s, want %s", what, cl.pod, cl.containerID, want)
			}
			earliest, latest = minTime(earliest, cl.at), maxTime(latest, cl.at)
		}
		if len(pods) != 3 {
			t.Errorf("%s: calls %+v, want one per pod", what, calls)
		}
		if spread := latest.Sub(earliest); spread >= window {
			t.Errorf("%s: the new starts were injected over %s, a window (%s) or more: one container went first", what, spread, window)
		}
	}
	n := restartAll()
	injectedAtOnce(n, "every JVM restarted")

	// The same while the operator is down: the verdict is in the status.
	stop()
	n = restartAll()
	c.runOperator(t, ns, opts)
	injectedAtOnce(n, "every JVM restarted while the operator was down")

	// A change is tried on one container first again.
	time.Sleep(window + time.Second) // past the breaker window of the loads above
	n = len(s.all())
	second := "rules:\n- pattern: \"java.lang.*\"\n"
	c.configMap(t, ns, "cfg", second)
	provenAs(second)
	c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionConfigApplied, metav1.ConditionTrue, jmxv1alpha1.ReasonConfigInUse)
	calls := s.all()[n:]
	if len(calls) != 3 {
		t.Fatalf("calls after the config changed %+v, want one per pod", calls)
	}
	for i, cl := range calls {
		if !cl.reconfigure || cl.config != second {
			t.Errorf("call %+v: want a reconfiguration with the new config", cl)
		}
		if i == 0 {
			continue
		}
		if gap := cl.at.Sub(calls[0].at); gap < window {
			t.Errorf("pod %s got the new config %s after pod %s, within the %s window", cl.pod, gap, calls[0].pod, window)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TestALandedChangeIsProvenWithNothingElseToDo: the canary's load is the
// only job of its exporter; once it has run for the breaker window, the
// change must be written proven (status.proven) without any other event to
// wake the exporter: a proven change is what lets the other pods, and the
// pods being created at start, have the agent. Before, the look that wrote
// it came only with the next event or resync (here an hour away).
func TestALandedChangeIsProvenWithNothingElseToDo(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "canary-proven")
	labels := map[string]string{"app": "orders"}
	c.createJVMPod(t, ns, "a", labels, "containerd://a1")
	s := &scripted{name: string(jmxv1alpha1.InjectionEphemeralContainer)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) { return loaded(r, ""), nil })
	const window = 15 * time.Second
	c.runOperator(t, ns, operator.Options{Resync: time.Hour, BreakerWindow: window,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: s}})
	c.createExporter(t, ns, "orders", labels)
	waitUntil(t, 30*time.Second, "pod a loaded", func() (bool, string) {
		rec := c.record(t, ns, "a")
		return len(rec.JVMs) == 1, fmt.Sprintf("%+v", rec)
	})
	waitUntil(t, window+20*time.Second, "status.proven once the load ran for the window", func() (bool, string) {
		ex := c.exporter(t, ns, "orders")
		pr := ex.Status.Proven
		return pr != nil && pr.Generation == ex.Generation, fmt.Sprintf("%+v", pr)
	})
}
