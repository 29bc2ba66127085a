// Command bench runs handlerkit's side-by-side benchmark (issue 17):
// handlerkit's pkg/sdk, controller-runtime, a hand-written sample-controller
// loop and a raw watch, one after another on one pkg/testenv control plane,
// interleaved over several runs, each contender in its own process. It
// prints markdown tables (see docs/performance.md) on stdout and progress
// on stderr.
//
//	go run . [-objects 10000] [-churn-objects N] [-runs 3] [-scenarios throughput,realistic,steady,memory]
//	go run . -from results.json   # render saved results again
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/handlerkit/handlerkit/bench/internal/report"
	"github.com/handlerkit/handlerkit/bench/internal/session"
	"github.com/handlerkit/handlerkit/bench/internal/suite"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

func main() {
	session.RunChildIfRequested()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := suite.DefaultConfig()
	var (
		workers, realWorkers    string
		scenarios               string
		contenders              string
		jsonOut, benchOut, from string
		qps                     float64
	)
	flag.IntVar(&cfg.Objects, "objects", cfg.Objects, "custom objects per steady workload (startup, latency), and per throughput workload unless -churn-objects is set")
	flag.IntVar(&cfg.ChurnObjects, "churn-objects", 0, "custom objects per throughput and realistic workload (default -objects)")
	flag.IntVar(&cfg.Pods, "pods", cfg.Pods, "Pods for the memory figures")
	flag.IntVar(&cfg.Runs, "runs", cfg.Runs, "interleaved runs")
	flag.StringVar(&workers, "workers", "1,8", "worker counts for the no-op throughput scenario")
	flag.StringVar(&realWorkers, "realistic-workers", "8", "worker counts for the realistic throughput scenario")
	flag.IntVar(&cfg.LatencyRate, "rate", cfg.LatencyRate, "steady updates per second for the latency figures")
	flag.DurationVar(&cfg.LatencyDuration, "duration", cfg.LatencyDuration, "how long the steady updates last")
	flag.Float64Var(&qps, "qps", float64(cfg.QPS), "client QPS of every contender")
	flag.IntVar(&cfg.Burst, "burst", cfg.Burst, "client burst of every contender")
	flag.StringVar(&scenarios, "scenarios", strings.Join(suite.AllScenarios, ","), "scenarios to run")
	flag.StringVar(&contenders, "contenders", "", "contenders to run, comma-separated (default all): raw-watch, handwritten, handlerkit, controller-runtime")
	flag.StringVar(&jsonOut, "json", "", "also write the raw results to this file")
	flag.StringVar(&benchOut, "benchfmt", "", "also write Go benchmark-format lines (for benchstat) to this file")
	flag.StringVar(&from, "from", "", "render results saved with -json instead of measuring")
	flag.Parse()
	cfg.QPS = float32(qps)
	cfg.Scenarios = strings.Split(scenarios, ",")
	if contenders != "" {
		cfg.Contenders = strings.Split(contenders, ",")
	}
	var err error
	if cfg.Workers, err = ints(workers); err != nil {
		return fmt.Errorf("-workers: %w", err)
	}
	if cfg.RealWorkers, err = ints(realWorkers); err != nil {
		return fmt.Errorf("-realistic-workers: %w", err)
	}
	cfg.Progress = os.Stderr

	var (
		res        *suite.Results
		measureErr error // a failed session: the tables still show what was measured before it
	)
	if from != "" {
		raw, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		res = &suite.Results{}
		if err := json.Unmarshal(raw, res); err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
	} else {
		if res, measureErr = measure(cfg); res == nil {
			return measureErr
		}
	}
	fmt.Print(report.Markdown(res))
	if jsonOut != "" {
		raw, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonOut, raw, 0o644); err != nil {
			return err
		}
	}
	if benchOut != "" {
		if err := os.WriteFile(benchOut, []byte(report.BenchFormat(res)), 0o644); err != nil {
			return err
		}
	}
	return measureErr
}

// measure starts a control plane and runs the suite on it.
func measure(cfg suite.Config) (*suite.Results, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// DeleteCollection with several workers keeps the cleanup between
	// sessions short.
	env, err := testenv.Start(ctx, testenv.WithAPIServerArgs("--delete-collection-workers=8"))
	if err != nil {
		return nil, err
	}
	defer env.Stop()
	fmt.Fprintf(os.Stderr, "control plane at %s\n", env.Config().Host)
	return suite.Run(ctx, env, cfg)
}

// ints parses "1,8".
func ints(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}
