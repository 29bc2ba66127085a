package scale

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Issue 28's targets.
const (
	// TargetExporterBytes bounds every exporter object.
	TargetExporterBytes = 256 << 10
	// TargetWritesPerStart bounds the API writes per container start in
	// the steady state.
	TargetWritesPerStart = 3
	// TargetPeakRSS bounds the operator's peak RSS at 10,000 pods.
	TargetPeakRSS = 250 << 20
	// TargetRecordSeconds bounds the time from every pod running to every
	// pod recorded at 10,000 pods.
	TargetRecordSeconds = 600
)

// Meta says where and how the benchmark ran.
type Meta struct {
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Machine  string    `json:"machine"`  // CPUs, model, memory
	Load     string    `json:"load"`     // e.g. "1-minute load average 1.2 at the start"
	Command  string    `json:"command"`  // how it was run
	Operator string    `json:"operator"` // the operator's build: version and revision
}

// Saved is what -json writes: the results of one command with its Meta.
type Saved struct {
	Meta    Meta      `json:"meta"`
	Results []*Result `json:"results"`
}

// Markdown renders the results as the tables of docs/performance.md.
func Markdown(meta Meta, results []*Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s–%s UTC on %s; %s. Operator: %s. Command: `%s`.\n\n",
		meta.Start.UTC().Format("2006-01-02 15:04"), meta.End.UTC().Format("15:04"), meta.Machine, meta.Load, meta.Operator, meta.Command)
	b.WriteString("| shape | pods | exporters | pods created and running | running → all recorded | first pod → all recorded | operator CPU | peak RSS | largest exporter (GET, JSON) | writes / start, initial | writes / start, steady | status writes / min, steady | restarts (recorded) | restart → recorded p50 / p99 / max |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		steadyStarts := max(r.RestartsRecorded, 1)
		lat := "—"
		if len(r.RestartLatency) == 3 {
			lat = fmt.Sprintf("%.1f / %.1f / %.1f s", r.RestartLatency[0], r.RestartLatency[1], r.RestartLatency[2])
		}
		pods := thousands(r.Pods)
		if r.Recorded < r.Pods {
			pods += fmt.Sprintf(" (%s recorded when the wait ended)", thousands(r.Recorded))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f s | %.0f s | %.0f s | %.0f s (initial phase %.0f s) | %.0f MiB | %s B | %.2f | %s | %s | %d (%d) | %s |\n",
			shapeName(r), pods, thousands(r.Exporters), r.CreateSeconds, r.RecordSeconds, r.FromFirstSeconds,
			r.CPUSeconds, r.InitialCPUSeconds, float64(r.PeakRSS)/(1<<20), thousands(r.LargestExporterBytes),
			r.Initial.writes()/float64(max(r.InitialStarts, 1)), steadyFigure(r, r.Steady.writes()/float64(steadyStarts)),
			steadyFigure(r, r.StatusWritesPerMinute()), r.Restarts, r.RestartsRecorded, lat)
	}
	b.WriteString("\nRequests per container start, by verb and resource (`handlerkit_client_requests_total` from the operator's /metrics; initial: the first start of every pod; steady: the restarts):\n\n")
	sorted := keysOf(results, func(r *Result) []map[string]float64 { return []map[string]float64{r.Initial, r.Steady} })
	slices.SortStableFunc(sorted, func(a, b string) int {
		// Writes first, then reads, each by resource.
		if wa, wb := isWrite(a), isWrite(b); wa != wb {
			if wa {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	b.WriteString("| request |")
	for _, r := range results {
		fmt.Fprintf(&b, " %s, initial | %s, steady |", columnName(r), columnName(r))
	}
	b.WriteString("\n|---|")
	for range results {
		b.WriteString("---|---|")
	}
	b.WriteString("\n")
	for _, k := range sorted {
		fmt.Fprintf(&b, "| %s |", k)
		for _, r := range results {
			fmt.Fprintf(&b, " %.3f | %s |", r.Initial[k]/float64(max(r.InitialStarts, 1)),
				steadyFigure(r, r.Steady[k]/float64(max(r.RestartsRecorded, 1))))
		}
		b.WriteString("\n")
	}
	b.WriteString("| **all writes** |")
	for _, r := range results {
		fmt.Fprintf(&b, " **%.3f** | **%s** |", r.Initial.writes()/float64(max(r.InitialStarts, 1)),
			steadyFigure(r, r.Steady.writes()/float64(max(r.RestartsRecorded, 1))))
	}
	b.WriteString("\n")
	eventsTable(&b, results)
	b.WriteString("\nTargets of issue 28:\n\n| target | ")
	for _, r := range results {
		fmt.Fprintf(&b, "%s | ", columnName(r))
	}
	b.WriteString("\n|---|")
	for range results {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	row := func(name string, f func(r *Result) (string, bool)) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, r := range results {
			v, ok := f(r)
			fmt.Fprintf(&b, " %s %s |", v, verdict(ok))
		}
		b.WriteString("\n")
	}
	row("every exporter object under 256 KiB", func(r *Result) (string, bool) {
		return thousands(r.LargestExporterBytes) + " B", r.LargestExporterBytes < TargetExporterBytes
	})
	row("at most 3 API writes per container start, steady state", func(r *Result) (string, bool) {
		w := r.Steady.writes() / float64(max(r.RestartsRecorded, 1))
		return fmt.Sprintf("%.2f", w), r.RestartsRecorded > 0 && w <= TargetWritesPerStart
	})
	row("operator peak RSS ≤ 250 MiB", func(r *Result) (string, bool) {
		return fmt.Sprintf("%.0f MiB", float64(r.PeakRSS)/(1<<20)), r.PeakRSS <= TargetPeakRSS
	})
	row("all pods recorded within 10 minutes of running", func(r *Result) (string, bool) {
		return fmt.Sprintf("%.0f s", r.RecordSeconds), r.Recorded == r.Pods && r.RecordSeconds <= TargetRecordSeconds
	})
	return b.String()
}

// columnName is the result's short name in the tables' headers: its shape,
// and its operator environment when it has one.
func columnName(r *Result) string {
	if len(r.OperatorEnv) == 0 {
		return r.Shape
	}
	return r.Shape + ", " + strings.Join(r.OperatorEnv, " ")
}

func shapeName(r *Result) string {
	name := fmt.Sprintf("%s exporters of %d pods", thousands(r.Exporters), r.Pods/max(r.Exporters, 1))
	if r.Shape == ShapeOne {
		name = "one exporter, all pods"
	}
	if len(r.OperatorEnv) > 0 {
		name += " (" + strings.Join(r.OperatorEnv, " ") + ")"
	}
	return name
}

func steadyFigure(r *Result, v float64) string {
	if r.RestartsRecorded == 0 {
		return "—"
	}
	return fmt.Sprintf("%.3f", v)
}

func isWrite(key string) bool {
	return Requests{key: 1}.writes() > 0
}

func verdict(ok bool) string {
	if ok {
		return "(met)"
	}
	return "(**not met**)"
}

// thousands writes n with thousands separators.
func thousands(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// eventsTable writes the Events per container start by object kind and
// reason, when the results carry them (results saved before they were
// counted do not).
func eventsTable(b *strings.Builder, results []*Result) {
	sorted := keysOf(results, func(r *Result) []map[string]float64 { return []map[string]float64{r.InitialEvents, r.SteadyEvents} })
	if len(sorted) == 0 {
		return
	}
	b.WriteString("\nEvents per container start, by the kind of object and reason (listed from the API server before and after each phase; an Event folded into an earlier one counts as often as its count):\n\n| Event |")
	for _, r := range results {
		fmt.Fprintf(b, " %s, initial | %s, steady |", columnName(r), columnName(r))
	}
	b.WriteString("\n|---|")
	for range results {
		b.WriteString("---|---|")
	}
	b.WriteString("\n")
	for _, k := range sorted {
		fmt.Fprintf(b, "| %s |", k)
		for _, r := range results {
			fmt.Fprintf(b, " %.3f | %s |", r.InitialEvents[k]/float64(max(r.InitialStarts, 1)),
				steadyFigure(r, r.SteadyEvents[k]/float64(max(r.RestartsRecorded, 1))))
		}
		b.WriteString("\n")
	}
}

// keysOf returns the keys of the maps that of gives for each result,
// sorted and each once.
func keysOf(results []*Result, of func(*Result) []map[string]float64) []string {
	keys := map[string]bool{}
	for _, r := range results {
		for _, m := range of(r) {
			for k := range m {
				keys[k] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(keys))
}
