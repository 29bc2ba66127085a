package suite

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/handlerkit/handlerkit/bench/internal/contender"
	"github.com/handlerkit/handlerkit/bench/internal/session"
	"github.com/handlerkit/handlerkit/bench/internal/workload"
)

// Rows lists the rows a scenario runs, each in a process of its own.
func Rows(scenario string, cfg Config) []Row {
	var rows []Row
	workers := func(handler string, counts []int, contenders ...string) {
		for _, c := range contenders {
			for _, w := range counts {
				rows = append(rows, Row{Contender: c, Workers: w, Handler: handler})
			}
		}
	}
	most := slices.Max(cfg.RealWorkers)
	switch scenario {
	case ScenarioThroughput:
		rows = append(rows, Row{Contender: contender.RawWatch, Handler: contender.HandlerNoop})
		workers(contender.HandlerNoop, cfg.Workers, contender.Handwritten, contender.Handlerkit, contender.ControllerRuntime)
	case ScenarioRealistic:
		workers(contender.HandlerRealistic, cfg.RealWorkers, contender.Handwritten, contender.Handlerkit, contender.ControllerRuntime)
		// controller-runtime with its priority queue off too.
		for _, w := range cfg.RealWorkers {
			rows = append(rows, Row{Contender: contender.ControllerRuntime, Variant: contender.VariantFIFOQueue, Workers: w, Handler: contender.HandlerRealistic})
		}
	case ScenarioSteady:
		rows = append(rows, Row{Contender: contender.RawWatch, Handler: contender.HandlerNoop})
		for _, c := range []string{contender.Handwritten, contender.Handlerkit, contender.ControllerRuntime} {
			rows = append(rows, Row{Contender: c, Workers: most, Handler: contender.HandlerRealistic})
		}
		rows = append(rows, Row{Contender: contender.ControllerRuntime, Variant: contender.VariantFIFOQueue, Workers: most, Handler: contender.HandlerRealistic})
	case ScenarioPods:
		rows = append(rows, Row{Contender: contender.RawWatch, Handler: contender.HandlerNoop})
		for _, c := range []string{contender.Handwritten, contender.Handlerkit, contender.ControllerRuntime} {
			rows = append(rows, Row{Contender: c, Workers: 1, Handler: contender.HandlerNoop})
		}
		rows = append(rows, Row{Contender: contender.ControllerRuntime, Variant: contender.VariantFIFOQueue, Workers: 1, Handler: contender.HandlerNoop})
	case ScenarioMemory:
		// Each contender's defaults (one worker, its default cache), and
		// like for like: managedFields kept by both, stripped by both,
		// metadata only in both.
		rows = []Row{
			{Contender: contender.RawWatch, Handler: contender.HandlerNoop},
			{Contender: contender.Handwritten, Workers: 1, Handler: contender.HandlerNoop},
			{Contender: contender.Handlerkit, Workers: 1, Handler: contender.HandlerNoop},
			{Contender: contender.Handlerkit, Variant: contender.VariantKeepManagedFields, Workers: 1, Handler: contender.HandlerNoop},
			{Contender: contender.Handlerkit, Variant: contender.VariantMetadataOnly, Workers: 1, Handler: contender.HandlerNoop},
			{Contender: contender.ControllerRuntime, Workers: 1, Handler: contender.HandlerNoop},
			{Contender: contender.ControllerRuntime, Variant: contender.VariantStripManagedFields, Workers: 1, Handler: contender.HandlerNoop},
			{Contender: contender.ControllerRuntime, Variant: contender.VariantMetadataOnly, Workers: 1, Handler: contender.HandlerNoop},
		}
	}
	return rows
}

// session runs one row of one scenario.
func (r *runner) session(ctx context.Context, scenario string, run int, row Row) error {
	switch scenario {
	case ScenarioThroughput, ScenarioRealistic:
		return r.churn(ctx, scenario, run, row)
	case ScenarioSteady:
		return r.steady(ctx, run, row)
	case ScenarioPods:
		return r.steadyPods(ctx, run, row)
	case ScenarioMemory:
		return r.memory(ctx, run, row)
	}
	return fmt.Errorf("unknown scenario %q", scenario)
}

func (r *runner) spec(row Row, kind, ns string, objects int) session.Spec {
	return session.Spec{
		Spec: contender.Spec{
			Contender: row.Contender, Variant: row.Variant, Kind: kind, Handler: row.Handler,
			Workers: max(row.Workers, 1), Namespace: ns, Objects: objects,
		},
		Kubeconfig: r.kubeconfig, QPS: r.cfg.QPS, Burst: r.cfg.Burst,
	}
}

// handleTimeout bounds the wait for n objects to be handled: far more than
// any contender needs, so that a stuck one fails instead of hanging.
func handleTimeout(n int) time.Duration {
	return 2*time.Minute + time.Duration(n)*20*time.Millisecond
}

// churn starts the contender on an empty namespace, creates Churn()
// exporters and times until all are handled, then updates them all and
// times the same.
func (r *runner) churn(ctx context.Context, scenario string, run int, row Row) error {
	n := r.cfg.Churn()
	ns, err := r.writer.Namespace(ctx, "bench-churn-")
	if err != nil {
		return err
	}
	if err := r.writer.CreateConfigMap(ctx, ns); err != nil {
		return err
	}
	child, err := session.Start(r.spec(row, contender.KindExporters, ns, n))
	if err != nil {
		return err
	}
	defer child.Kill()
	// One object outside the numbered set shows the whole pipeline runs
	// (caches synced, workers started) before the clock starts.
	if err := r.writer.CreateWarmup(ctx, ns); err != nil {
		return err
	}
	if _, err := child.AwaitType(ctx, 2*time.Minute, session.MsgFirst); err != nil {
		return err
	}

	t0 := time.Now()
	if err := r.writer.CreateExporters(ctx, ns, n); err != nil {
		return err
	}
	written := time.Since(t0)
	created, err := child.AwaitReached(ctx, handleTimeout(n), 1)
	if err != nil {
		return err
	}
	t1 := time.Now()
	if err := r.writer.UpdateExporters(ctx, ns, n, 9405); err != nil {
		return err
	}
	rewritten := time.Since(t1)
	updated, err := child.AwaitReached(ctx, handleTimeout(n), 2)
	if err != nil {
		return err
	}
	final, err := r.stop(ctx, child, run, scenario, row)
	if err != nil {
		return err
	}
	res := r.results
	res.add(scenario, FigCreate, row, run, rate(n, t0, created.At))
	res.add(scenario, FigUpdate, row, run, rate(n, t1, updated.At))
	res.add(scenario, FigWriterCreate, row, run, float64(n)/written.Seconds())
	res.add(scenario, FigCreateLag, row, run, seconds(created.At-t0.Add(written).UnixNano()))
	res.add(scenario, FigUpdateLag, row, run, seconds(updated.At-t1.Add(rewritten).UnixNano()))
	if scenario == ScenarioRealistic {
		for class, count := range final.Requests {
			res.addClass(scenario, FigRequests, class, row, run, float64(count))
		}
		res.add(scenario, FigFailures, row, run, float64(final.Failures))
	}
	return r.writer.DeleteExporters(ctx, ns)
}

// steady starts the contender on the prepared exporters (startup), then
// sends updates at a steady rate (latency, requests per call).
func (r *runner) steady(ctx context.Context, run int, row Row) error {
	if err := r.writer.SettleStatuses(ctx, r.steadyNS); err != nil {
		return err
	}
	return r.startupAndLatency(ctx, ScenarioSteady, run, row, contender.KindExporters, r.steadyNS, r.cfg.Objects, r.writer.SteadyUpdates)
}

// steadyPods is steady on the prepared Pods, with annotation updates.
func (r *runner) steadyPods(ctx context.Context, run int, row Row) error {
	return r.startupAndLatency(ctx, ScenarioPods, run, row, contender.KindPods, r.podLoadNS, r.cfg.Pods, r.writer.SteadyPodUpdates)
}

// startupAndLatency starts the contender on the n objects of kind in ns
// (startup), then sends updates at a steady rate (latency, requests per
// call).
func (r *runner) startupAndLatency(ctx context.Context, scenario string, run int, row Row, kind, ns string, n int,
	updates func(ctx context.Context, ns string, n, rate int, d time.Duration) (workload.SteadyResult, error)) error {
	child, err := session.Start(r.spec(row, kind, ns, n))
	if err != nil {
		return err
	}
	defer child.Kill()
	started, err := child.AwaitType(ctx, time.Minute, session.MsgStarted)
	if err != nil {
		return err
	}
	first, err := child.AwaitType(ctx, handleTimeout(n), session.MsgFirst)
	if err != nil {
		return err
	}
	all, err := child.AwaitReached(ctx, handleTimeout(n), 1)
	if err != nil {
		return err
	}
	time.Sleep(r.cfg.Drain / 2) // let the last handlings of the initial list finish
	before, err := child.Mark(ctx, "steady-start")
	if err != nil {
		return err
	}
	sent, err := updates(ctx, ns, n, r.cfg.LatencyRate, r.cfg.LatencyDuration)
	if err != nil {
		return err
	}
	time.Sleep(r.cfg.Drain) // let the last updates arrive
	after, err := child.Mark(ctx, "steady-end")
	if err != nil {
		return err
	}
	final, err := r.stop(ctx, child, run, scenario, row)
	if err != nil {
		return err
	}
	res := r.results
	res.add(scenario, FigStartFirst, row, run, seconds(first.At-started.At))
	res.add(scenario, FigStartAll, row, run, seconds(all.At-started.At))
	res.add(scenario, FigLatencyRate, row, run, float64(sent.Sent)/sent.Elapsed.Seconds())
	if len(final.LatencyNs) > 0 {
		res.add(scenario, FigLatencyP50, row, run, seconds(percentile(final.LatencyNs, 50)))
		res.add(scenario, FigLatencyP99, row, run, seconds(percentile(final.LatencyNs, 99)))
	}
	calls := after.Calls - before.Calls
	for class, count := range after.Requests {
		if calls > 0 {
			res.addClass(scenario, FigSteadyPerCall, class, row, run, float64(count-before.Requests[class])/float64(calls))
		}
	}
	return nil
}

// memory syncs the prepared Pods into the contender and reads its memory.
func (r *runner) memory(ctx context.Context, run int, row Row) error {
	spec := r.spec(row, contender.KindPods, r.podsNS, r.cfg.Pods)
	spec.Memory = true
	child, err := session.Start(spec)
	if err != nil {
		return err
	}
	defer child.Kill()
	m, err := child.AwaitType(ctx, handleTimeout(r.cfg.Pods), session.MsgMemory)
	if err != nil {
		return err
	}
	if _, err := r.stop(ctx, child, run, ScenarioMemory, row); err != nil {
		return err
	}
	if m.Memory == nil || m.Error != "" {
		return fmt.Errorf("memory: %s", m.Error)
	}
	r.results.add(ScenarioMemory, FigHeap, row, run, float64(m.Memory.HeapInuse))
	r.results.add(ScenarioMemory, FigHeapLive, row, run, float64(m.Memory.HeapAlloc))
	r.results.add(ScenarioMemory, FigRSS, row, run, float64(m.Memory.RSS))
	r.results.add(ScenarioMemory, FigPeakRSS, row, run, float64(m.Memory.PeakRSS))
	r.results.add(ScenarioMemory, FigCPU, row, run, m.Memory.CPUSeconds)
	return nil
}

// stop stops the child and notes an error it returned while stopping.
func (r *runner) stop(ctx context.Context, child *session.Child, run int, scenario string, row Row) (session.Message, error) {
	final, err := child.Stop(ctx, time.Minute)
	if err == nil && final.Error != "" {
		note := fmt.Sprintf("run %d, %s, %s: stopped with an error: %s", run, scenario, row, final.Error)
		r.results.Notes = append(r.results.Notes, note)
		r.progress("note: %s", note)
	}
	return final, err
}

// rate is n events over the time from start to the child's clock at.
func rate(n int, start time.Time, at int64) float64 {
	return float64(n) / time.Duration(at-start.UnixNano()).Seconds()
}

func seconds(ns int64) float64 { return time.Duration(ns).Seconds() }

// percentile is the p-th percentile (nearest rank) of samples.
func percentile(samples []int64, p float64) int64 {
	s := slices.Clone(samples)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
