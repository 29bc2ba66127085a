package report

import (
	"testing"

	"github.com/handlerkit/handlerkit/bench/internal/contender"
	"github.com/handlerkit/handlerkit/bench/internal/suite"
)

func TestVerdictsFollowTheStatedRules(t *testing.T) {
	for _, c := range []struct {
		ratios []float64
		goal   float64
		want   string
	}{
		{[]float64{0.95, 1.02, 1.10}, 1, "parity (the range straddles 1.0)"},
		{[]float64{0.75, 0.72, 1.17}, 1, "parity (the range straddles 1.0)"},
		{[]float64{1.02, 1.05, 1.10}, 1, "yes"},
		{[]float64{0.90, 0.95, 0.97}, 1, "**no**"},
		{[]float64{0.78, 0.79, 0.97}, 0.8, "**no** (within the spread)"},
		{[]float64{0.95, 1.02, 1.10}, 0.8, "yes"},
		{nil, 1, "not measured"},
	} {
		if got := atLeast(spreadOf(c.ratios), c.goal); got != c.want {
			t.Errorf("atLeast(%v, %v) = %q, want %q", c.ratios, c.goal, got, c.want)
		}
	}
}

func TestThroughputIsNotMeasurableWhenTheRawWatchIsNotTheBest(t *testing.T) {
	cfg := suite.Config{Workers: []int{1}, RealWorkers: []int{1}, Runs: 1}
	raw := suite.Row{Contender: contender.RawWatch, Handler: contender.HandlerNoop}
	hk := suite.Row{Contender: contender.Handlerkit, Workers: 1, Handler: contender.HandlerNoop}
	for _, c := range []struct {
		rawRate, hkRate float64
		behind          bool
	}{
		{800, 900, true},   // a contender beat the raw watch: the writer set the pace
		{1000, 900, false}, // the raw watch leads: the contenders' work shows
	} {
		tab := index([]suite.Measurement{
			{Scenario: suite.ScenarioThroughput, Figure: suite.FigCreate, Row: raw, Run: 1, Value: c.rawRate},
			{Scenario: suite.ScenarioThroughput, Figure: suite.FigCreate, Row: hk, Run: 1, Value: c.hkRate},
		})
		if _, behind := rawWatchBehind(tab, cfg, suite.ScenarioThroughput, suite.FigCreate); behind != c.behind {
			t.Errorf("raw watch %v, handlerkit %v: behind = %v, want %v", c.rawRate, c.hkRate, behind, c.behind)
		}
	}
}
