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
