package report

import (
	"fmt"
	"strings"

	"github.com/handlerkit/handlerkit/bench/internal/suite"
)

// units maps a figure to the unit of its benchmark-format line.
var units = map[string]struct {
	unit   string
	factor float64
}{
	suite.FigCreate:        {"events/s", 1},
	suite.FigUpdate:        {"events/s", 1},
	suite.FigWriterCreate:  {"writes/s", 1},
	suite.FigCreateLag:     {"ms", 1000},
	suite.FigUpdateLag:     {"ms", 1000},
	suite.FigRequests:      {"requests", 1},
	suite.FigFailures:      {"failures", 1},
	suite.FigSteadyPerCall: {"requests/call", 1},
	suite.FigLatencyP50:    {"ms", 1000},
	suite.FigLatencyP99:    {"ms", 1000},
	suite.FigLatencyRate:   {"updates/s", 1},
	suite.FigStartFirst:    {"s", 1},
	suite.FigStartAll:      {"s", 1},
	suite.FigHeap:          {"B", 1},
	suite.FigHeapLive:      {"B", 1},
	suite.FigRSS:           {"B", 1},
	suite.FigPeakRSS:       {"B", 1},
}

// BenchFormat renders every measurement as a line of Go's benchmark
// format, one per run, so that benchstat can compare two result files:
// "BenchmarkThroughput/create/handlerkit/workers=8 1 4210 events/s".
func BenchFormat(res *suite.Results) string {
	var b strings.Builder
	for _, m := range res.Measurements {
		u, ok := units[m.Figure]
		if !ok {
			continue
		}
		name := []string{"Benchmark" + strings.ToUpper(m.Scenario[:1]) + m.Scenario[1:], m.Figure}
		if m.Class != "" {
			name = append(name, m.Class)
		}
		name = append(name, m.Row.Contender)
		if m.Row.Variant != "" {
			name = append(name, m.Row.Variant)
		}
		if m.Row.Workers > 0 {
			name = append(name, fmt.Sprintf("workers=%d", m.Row.Workers))
		}
		fmt.Fprintf(&b, "%s 1 %g %s\n", strings.Join(name, "/"), m.Value*u.factor, u.unit)
	}
	return b.String()
}
