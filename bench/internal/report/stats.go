package report

import (
	"slices"

	"github.com/handlerkit/handlerkit/bench/internal/suite"
)

// spread is a figure over runs: its median and range.
type spread struct {
	median, min, max float64
	n                int
}

func spreadOf(values []float64) spread {
	if len(values) == 0 {
		return spread{}
	}
	s := slices.Clone(values)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{median: med, min: s[0], max: s[len(s)-1], n: len(s)}
}

// table indexes measurements for lookups by figure, class, row and run.
type table struct {
	byKey map[key]map[int]float64
	runs  []int
}

type key struct {
	scenario, figure, class string
	row                     suite.Row
}

func index(ms []suite.Measurement) table {
	t := table{byKey: map[key]map[int]float64{}}
	seen := map[int]bool{}
	for _, m := range ms {
		k := key{m.Scenario, m.Figure, m.Class, m.Row}
		if t.byKey[k] == nil {
			t.byKey[k] = map[int]float64{}
		}
		t.byKey[k][m.Run] = m.Value
		if !seen[m.Run] {
			seen[m.Run] = true
			t.runs = append(t.runs, m.Run)
		}
	}
	slices.Sort(t.runs)
	return t
}

// values returns a figure of a row over the runs that measured it.
func (t table) values(k key) []float64 {
	var out []float64
	for _, run := range t.runs {
		if v, ok := t.byKey[k][run]; ok {
			out = append(out, v)
		}
	}
	return out
}

// ratios returns, per run, the row's figure divided by the best among
// rows (higher or lower being better), so that a run's noise cancels out.
func (t table) ratios(k key, rows []suite.Row, higherIsBetter bool) []float64 {
	var out []float64
	for _, run := range t.runs {
		v, ok := t.byKey[k][run]
		if !ok {
			continue
		}
		best, found := 0.0, false
		for _, r := range rows {
			other := k
			other.row = r
			o, ok := t.byKey[other][run]
			if !ok {
				continue
			}
			if !found || (higherIsBetter && o > best) || (!higherIsBetter && o < best) {
				best, found = o, true
			}
		}
		if found && best != 0 {
			out = append(out, v/best)
		}
	}
	return out
}

// pairRatios returns, per run, a's figure divided by b's.
func (t table) pairRatios(ka, kb key) []float64 {
	var out []float64
	for _, run := range t.runs {
		a, okA := t.byKey[ka][run]
		b, okB := t.byKey[kb][run]
		if okA && okB && b != 0 {
			out = append(out, a/b)
		}
	}
	return out
}

// measured reports whether the row has any figure of the scenario in run.
func (t table) measured(scenario string, row suite.Row, run int) bool {
	for k, byRun := range t.byKey {
		if k.scenario == scenario && k.row == row {
			if _, ok := byRun[run]; ok {
				return true
			}
		}
	}
	return false
}

// valuesOrZero is values for counters: a run that measured the row but has
// no count for the class counted zero.
func (t table) valuesOrZero(k key) []float64 {
	var out []float64
	for _, run := range t.runs {
		if v, ok := t.byKey[k][run]; ok {
			out = append(out, v)
		} else if t.measured(k.scenario, k.row, run) {
			out = append(out, 0)
		}
	}
	return out
}

// sumOverClasses adds a counter's classes per run.
func (t table) sumOverClasses(scenario, figure string, row suite.Row, classes []string) []float64 {
	var out []float64
	for _, run := range t.runs {
		if !t.measured(scenario, row, run) {
			continue
		}
		sum := 0.0
		for _, c := range classes {
			sum += t.byKey[key{scenario, figure, c, row}][run]
		}
		out = append(out, sum)
	}
	return out
}
