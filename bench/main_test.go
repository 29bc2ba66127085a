package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/bench/internal/report"
	"github.com/handlerkit/handlerkit/bench/internal/session"
	"github.com/handlerkit/handlerkit/bench/internal/suite"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

func TestMain(m *testing.M) {
	session.RunChildIfRequested() // the suite re-runs this test binary as each contender
	os.Exit(m.Run())
}

// TestEveryContenderProducesEveryFigure runs the whole benchmark at toy
// size, so that `make test` catches a contender or a figure that rots. The
// figures themselves mean nothing at this size.
func TestEveryContenderProducesEveryFigure(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := suite.Config{
		Objects: 20, Pods: 20, Runs: 1, Workers: []int{2}, RealWorkers: []int{2},
		LatencyRate: 50, LatencyDuration: 500 * time.Millisecond,
		QPS: 500, Burst: 1000, Drain: 200 * time.Millisecond,
		Scenarios: suite.AllScenarios,
	}
	if testing.Verbose() {
		cfg.Progress = os.Stderr
	}
	res, err := suite.Run(ctx, env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	md := report.Markdown(res)
	for _, want := range []string{
		"### Throughput, no-op handler", "### Throughput, realistic handler", "### API load",
		"### Latency", "### Requests per handler call", "### Startup", "### Memory", "### Targets",
		"| raw-watch |", "| handwritten |", "| handlerkit |", "| controller-runtime |",
		"handlerkit, WithMetadataOnly", "0 live API reads per event in steady state | 0.000 GETs per call | yes",
		"controller-runtime, TransformStripManagedFields", "controller-runtime, OnlyMetadata", "### Memory, like for like",
		"| controller-runtime (fifo-queue) |", "Pods (a built-in kind", "CPU s",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
	// Every row of every table has its figures; "—" marks a missing one.
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "| ") && strings.Contains(line, " — |") && !strings.HasPrefix(line, "| raw-watch |") {
			t.Errorf("a figure is missing: %s", line)
		}
	}
	if bf := report.BenchFormat(res); !strings.Contains(bf, "BenchmarkThroughput/create/handlerkit/workers=2 1 ") {
		t.Errorf("benchmark-format output lacks handlerkit's create figure:\n%s", bf)
	}
}
