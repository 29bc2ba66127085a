package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/handlerkit/handlerkit/bench/internal/contender"
	"github.com/handlerkit/handlerkit/bench/internal/probe"
	"github.com/handlerkit/handlerkit/bench/internal/suite"
)

// targets checks issue 17's targets against the per-run ratios, judged on
// the median (the range shows how sure that is), by these rules:
//
//   - A ratio to another contender whose range over the runs straddles 1.0
//     is "parity": neither is shown to be faster.
//   - A throughput figure of a scenario whose raw watch, which only counts
//     events, is not the best row of its table (its median "× best" below
//     1.0) is "not measurable on this workload": what the contenders do
//     after the watch is not what limits them, the API server's write rate
//     is, and the differences between them are noise.
func targets(b *strings.Builder, t table, cfg suite.Config) {
	var out [][]string
	row := func(c string, w int, handler string) suite.Row {
		return suite.Row{Contender: c, Workers: w, Handler: handler}
	}
	for _, scenario := range []string{suite.ScenarioThroughput, suite.ScenarioRealistic} {
		if !slices.Contains(cfg.Scenarios, scenario) {
			continue
		}
		handler, counts := contender.HandlerNoop, cfg.Workers
		if scenario == suite.ScenarioRealistic {
			handler, counts = contender.HandlerRealistic, cfg.RealWorkers
		}
		for _, w := range counts {
			for _, goal := range []struct {
				other string
				min   float64
			}{{contender.ControllerRuntime, 1.0}, {contender.Handwritten, 0.8}} {
				var (
					cells    []string
					verdicts []string
				)
				for _, fig := range []string{suite.FigCreate, suite.FigUpdate} {
					r := spreadOf(t.pairRatios(
						key{scenario, fig, "", row(contender.Handlerkit, w, handler)},
						key{scenario, fig, "", row(goal.other, w, handler)}))
					cells = append(cells, fig+" "+ratioCell(r))
					if raw, ok := rawWatchBehind(t, cfg, scenario, fig); ok {
						verdicts = append(verdicts, fig+" not measurable on this workload (the raw watch scored "+ratioCell(raw)+" of the best)")
						continue
					}
					verdicts = append(verdicts, fig+" "+atLeast(r, goal.min))
				}
				out = append(out, []string{
					fmt.Sprintf("throughput ≥ %.0f%% of %s (%s, %d workers)", goal.min*100, goal.other, handler, w),
					strings.Join(cells, "; "), strings.Join(verdicts, "; "),
				})
			}
		}
	}
	if slices.Contains(cfg.Scenarios, suite.ScenarioMemory) {
		for _, fig := range []string{suite.FigHeap, suite.FigHeapLive, suite.FigRSS} {
			r := spreadOf(t.pairRatios(
				key{suite.ScenarioMemory, fig, "", row(contender.Handlerkit, 1, contender.HandlerNoop)},
				key{suite.ScenarioMemory, fig, "", row(contender.ControllerRuntime, 1, contender.HandlerNoop)}))
			out = append(out, []string{
				fmt.Sprintf("memory (%s), default options, ≤ 60%% of controller-runtime's default cache", fig),
				ratioCell(r), atMost(r, 0.6),
			})
		}
	}
	if slices.Contains(cfg.Scenarios, suite.ScenarioSteady) {
		most := slices.Max(cfg.RealWorkers)
		r := spreadOf(t.valuesOrZero(key{suite.ScenarioSteady, suite.FigSteadyPerCall, probe.ClassGet, row(contender.Handlerkit, most, contender.HandlerRealistic)}))
		out = append(out, []string{"0 live API reads per event in steady state", cell(r, 3) + " GETs per call", verdict(r.n > 0 && r.max == 0)})
	}
	if len(out) == 0 {
		return
	}
	b.WriteString("### Targets (handlerkit's figure over the other's, per run)\n\n")
	markdownTable(b, []string{"Target", "Measured", "Met"}, out)
}

// rawWatchBehind reports whether the scenario has a raw watch row whose
// figure is, on the median, below the best row of its runs, and its ratio.
func rawWatchBehind(t table, cfg suite.Config, scenario, fig string) (spread, bool) {
	rows := suite.Rows(scenario, cfg)
	for _, r := range rows {
		if r.Contender != contender.RawWatch {
			continue
		}
		s := spreadOf(t.ratios(key{scenario, fig, "", r}, rows, true))
		return s, s.n > 0 && s.median < 1
	}
	return spread{}, false
}

// atLeast judges a ratio that should be at least goal: met on the median,
// and says so when the spread straddles the goal. A goal of 1.0 whose
// spread straddles it is parity.
func atLeast(r spread, goal float64) string {
	switch {
	case r.n == 0:
		return "not measured"
	case goal == 1 && r.min < 1 && r.max > 1:
		return "parity (the range straddles 1.0)"
	case r.median >= goal:
		return "yes"
	case r.max >= goal:
		return "**no** (within the spread)"
	}
	return "**no**"
}

// atMost judges a ratio that should be at most goal.
func atMost(r spread, goal float64) string {
	switch {
	case r.n == 0:
		return "not measured"
	case r.median <= goal:
		return "yes"
	case r.min <= goal:
		return "**no** (within the spread)"
	}
	return "**no**"
}

func verdict(met bool) string {
	if met {
		return "yes"
	}
	return "**no**"
}
