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
// the median (the range shows how sure that is).
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

// atLeast judges a ratio that should be at least goal: met on the median,
// and says so when the spread straddles the goal.
func atLeast(r spread, goal float64) string {
	switch {
	case r.n == 0:
		return "not measured"
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
