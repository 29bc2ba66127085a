package scale_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/bench/internal/scale"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// TestSmokeEveryPodIsRecordedInBothShapes runs the scale benchmark at toy
// size (50 pods, a second of restarts) in both shapes, so that `make
// test` catches a harness that rots: every pod and every restart recorded by
// the real operator binary, every figure measured, and the simulated
// kubelet's termination messages in the form jmx-attach writes.
func TestSmokeEveryPodIsRecordedInBothShapes(t *testing.T) {
	root, err := scale.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env := testenv.New(t)
	if err := scale.Prepare(ctx, env, root); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	binary, err := scale.BuildOperator(ctx, root, dir, append(raceFlags, "-trimpath")...)
	if err != nil {
		t.Fatal(err)
	}
	const pods = 50
	var results []*scale.Result
	for _, shape := range []string{scale.ShapeOne, scale.ShapeMany} {
		cfg := scale.Config{
			Pods: pods, Shape: shape, PodsPerExporter: 10,
			RestartRate: 20, SteadyDuration: time.Second,
			// The canary's window, a minute by default, is not what this
			// test is about.
			Operator: binary, OperatorArgs: []string{"--breaker-window=1s"},
			Timeout: 3 * time.Minute, Dir: dir,
		}
		if testing.Verbose() {
			cfg.Progress = os.Stderr
		}
		res, err := scale.Run(ctx, env, cfg)
		if err != nil {
			t.Fatalf("shape %s: %v", shape, err)
		}
		results = append(results, res)
		check(t, res)
	}
	md := scale.Markdown(scale.Meta{Start: time.Now(), End: time.Now(), Machine: "test", Load: "test", Command: "test", Operator: "test"}, results)
	for _, want := range []string{
		"| one exporter, all pods | 50 | 1 |", "| 5 exporters of 10 pods | 50 | 5 |",
		"| patch pods/ephemeralcontainers |", "| **all writes** |", "every exporter object under 256 KiB",
		"| Pod Injected |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
}

func check(t *testing.T, r *scale.Result) {
	t.Helper()
	if r.Recorded != r.Pods {
		t.Errorf("%s: %d of %d pods recorded", r.Shape, r.Recorded, r.Pods)
	}
	if r.Restarts == 0 || r.RestartsRecorded != r.Restarts {
		t.Errorf("%s: %d restarts, %d recorded", r.Shape, r.Restarts, r.RestartsRecorded)
	}
	// Every start took one ephemeral container at least, which the kubelet
	// answered.
	if got := r.Initial["patch pods/ephemeralcontainers"]; got < float64(r.Pods) {
		t.Errorf("%s: %v ephemeral container patches for %d pods", r.Shape, got, r.Pods)
	}
	if got := r.Steady["patch pods/ephemeralcontainers"]; got < float64(r.RestartsRecorded) {
		t.Errorf("%s: %v ephemeral container patches for %d restarts", r.Shape, got, r.RestartsRecorded)
	}
	if r.Answered < r.Pods+r.Restarts {
		t.Errorf("%s: %d ephemeral containers answered for %d starts", r.Shape, r.Answered, r.Pods+r.Restarts)
	}
	if r.Initial["update prometheusjmxexporters/status"]+r.Initial["patch prometheusjmxexporters/status"] == 0 {
		t.Errorf("%s: no exporter status written: %v", r.Shape, r.Initial)
	}
	// The operator says Injected on each pod; Events go out asynchronously,
	// so only their presence is asserted.
	if r.InitialEvents["Pod Injected"] == 0 {
		t.Errorf("%s: no Injected Event on a pod counted: %v", r.Shape, r.InitialEvents)
	}
	if r.CPUSeconds <= 0 || r.PeakRSS == 0 || r.LargestExporterBytes == 0 || r.RecordSeconds <= 0 || len(r.RestartLatency) != 3 {
		t.Errorf("%s: a figure is missing: %+v", r.Shape, r)
	}
	if r.OperatorExitError != "" {
		t.Errorf("%s: the operator did not stop cleanly: %s", r.Shape, r.OperatorExitError)
	}
	if len(r.Messages) == 0 {
		t.Errorf("%s: no termination messages read back", r.Shape)
	}
	for _, m := range r.Messages {
		results, err := jvm.ParseTerminationLog([]byte(m))
		if err != nil || len(results) != 1 || !results[0].OK() || results[0].Port != 9404 {
			t.Errorf("%s: termination message %q: %v, %+v", r.Shape, m, err, results)
		}
	}
}

func TestParseRequestsSumsCodesByVerbAndResource(t *testing.T) {
	got, err := scale.ParseRequests(strings.NewReader(`# HELP handlerkit_client_requests_total Requests.
# TYPE handlerkit_client_requests_total counter
handlerkit_client_requests_total{code="200",resource="pods",verb="get"} 3
handlerkit_client_requests_total{code="404",resource="pods",verb="get"} 1
handlerkit_client_requests_total{code="200",resource="",verb="get"} 2
handlerkit_client_requests_total{code="<error>",resource="prometheusjmxexporters/status",verb="update"} 1
rest_client_requests_total{code="200",host="x",method="GET"} 9
`))
	if err != nil {
		t.Fatal(err)
	}
	want := scale.Requests{"get pods": 4, "get (discovery)": 2, "update prometheusjmxexporters/status": 1}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

// TestMarkdownNamesTheEnvironmentAndBreaksEventsOut: a result run with an
// operator environment is named by it in every table, and the Events table
// lists each kind and reason per container start.
func TestMarkdownNamesTheEnvironmentAndBreaksEventsOut(t *testing.T) {
	r := &scale.Result{Shape: scale.ShapeOne, Pods: 100, Exporters: 1, Recorded: 100, InitialStarts: 100,
		Restarts: 10, RestartsRecorded: 10, RestartLatency: []float64{0.1, 0.2, 0.3}, SteadySeconds: 60,
		OperatorEnv:   []string{"GOMEMLIMIT=217MiB"},
		Initial:       scale.Requests{"patch pods": 100, "create events": 50},
		Steady:        scale.Requests{"patch pods": 10, "patch pods/ephemeralcontainers": 10},
		InitialEvents: scale.Events{"Pod Injected": 50},
		SteadyEvents:  scale.Events{"Pod InjectionRetry": 5},
	}
	md := scale.Markdown(scale.Meta{Start: time.Now(), End: time.Now()}, []*scale.Result{r})
	for _, want := range []string{
		"| one exporter, all pods (GOMEMLIMIT=217MiB) | 100 | 1 |",
		"| one, GOMEMLIMIT=217MiB, initial | one, GOMEMLIMIT=217MiB, steady |",
		"| Pod Injected | 0.500 | 0.000 |",
		"| Pod InjectionRetry | 0.000 | 0.500 |",
		"| **all writes** | **1.500** | **2.000** |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
}
