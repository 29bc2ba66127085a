package sdk_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// A rest.Config that leaves QPS at zero, as rest.InClusterConfig does, gets
// the framework's client defaults instead of client-go's 5 QPS; values the
// caller set are kept, and WithClientRateLimit overrides both.
func TestClientRateLimitDefaultsApplyOnlyWhenTheConfigSetsNone(t *testing.T) {
	for _, c := range []struct {
		name       string
		qps        float32
		burst      int
		opts       []sdk.Option
		wantQPS    float32
		wantBurst  int
		wantClient float32 // the QPS of the clientset's limiter; 0 when there is none
	}{
		{"unset", 0, 0, nil, sdk.DefaultClientQPS, sdk.DefaultClientBurst, sdk.DefaultClientQPS},
		{"set by the caller", 7, 9, nil, 7, 9, 7},
		{"only burst set", 0, 40, nil, sdk.DefaultClientQPS, 40, sdk.DefaultClientQPS},
		{"unlimited", -1, 0, nil, -1, sdk.DefaultClientBurst, 0},
		{"option over unset", 0, 0, []sdk.Option{sdk.WithClientRateLimit(100, 200)}, 100, 200, 100},
		{"option over the caller's", 7, 9, []sdk.Option{sdk.WithClientRateLimit(100, 200)}, 100, 200, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := offline()
			cfg.QPS, cfg.Burst = c.qps, c.burst
			op, err := sdk.New(cfg, append([]sdk.Option{sdk.WithRegisterer(newRegistry())}, c.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			got := op.RESTConfig()
			if got.QPS != c.wantQPS || got.Burst != c.wantBurst {
				t.Errorf("RESTConfig() QPS/Burst = %v/%d, want %v/%d", got.QPS, got.Burst, c.wantQPS, c.wantBurst)
			}
			var clientQPS float32
			if l := op.Clientset().CoreV1().RESTClient().GetRateLimiter(); l != nil {
				clientQPS = l.QPS()
			}
			if clientQPS != c.wantClient {
				t.Errorf("clientset limiter QPS = %v, want %v", clientQPS, c.wantClient)
			}
			if cfg.QPS != c.qps {
				t.Errorf("New changed the caller's config: QPS %v, want %v", cfg.QPS, c.qps)
			}
		})
	}
}

func TestWithClientRateLimitRejectsBadValues(t *testing.T) {
	for _, c := range []struct {
		qps   float32
		burst int
	}{{0, 10}, {10, 0}, {10, -1}} {
		if _, err := sdk.New(offline(), sdk.WithRegisterer(newRegistry()), sdk.WithClientRateLimit(c.qps, c.burst)); err == nil {
			t.Errorf("WithClientRateLimit(%v, %d) accepted", c.qps, c.burst)
		}
	}
}

// client-go's request metrics land in the Operator's registry, so users can
// see request rates, latencies and client-side throttling.
func TestClientRequestMetricsAreInTheOperatorsRegistry(t *testing.T) {
	env := sdk.SharedEnv(t)
	f := newFixtureWithConfig(t, env, env.Config())
	if _, err := f.op.Clientset().CoreV1().ConfigMaps(f.ns).Create(context.Background(), configMap(f.ns, "counted", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.op.Clientset().CoreV1().ConfigMaps(f.ns).Get(context.Background(), "missing", metav1.GetOptions{}); err == nil {
		t.Fatal("Get of a missing object succeeded")
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"rest_client_requests_total", map[string]string{"code": "201", "method": "POST"}},
		{"rest_client_requests_total", map[string]string{"code": "404", "method": "GET"}},
		{"rest_client_request_duration_seconds", map[string]string{"verb": "POST"}},
		{"rest_client_rate_limiter_duration_seconds", map[string]string{"verb": "POST"}},
	} {
		if got := sumMatching(t, f.reg, c.name, c.labels); got < 1 {
			t.Errorf("%s%v = %v, want at least 1", c.name, c.labels, got)
		}
	}
}

// sumMatching adds up the series of name whose labels include want.
func sumMatching(t testing.TB, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}
