package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/handlerkit/handlerkit/bench/internal/contender"
	"github.com/handlerkit/handlerkit/bench/internal/probe"
	"github.com/handlerkit/handlerkit/bench/internal/suite"
)

// Markdown renders the results as the tables of docs/performance.md.
func Markdown(res *suite.Results) string {
	t := index(res.Measurements)
	cfg := res.Config
	var b strings.Builder
	header(&b, res)
	if slices.Contains(cfg.Scenarios, suite.ScenarioThroughput) {
		throughput(&b, t, cfg, suite.ScenarioThroughput, "no-op handler")
	}
	if slices.Contains(cfg.Scenarios, suite.ScenarioRealistic) {
		throughput(&b, t, cfg, suite.ScenarioRealistic, "realistic handler (cached read of a ConfigMap, status patch)")
		apiLoad(&b, t, cfg)
	}
	if slices.Contains(cfg.Scenarios, suite.ScenarioSteady) {
		steady(&b, t, cfg, suite.ScenarioSteady, number(float64(cfg.Objects), 0)+" exporters (a custom resource)")
	}
	if slices.Contains(cfg.Scenarios, suite.ScenarioPods) {
		steady(&b, t, cfg, suite.ScenarioPods, number(float64(cfg.Pods), 0)+" Pods (a built-in kind; no-op handler that reads the Pod)")
	}
	if slices.Contains(cfg.Scenarios, suite.ScenarioMemory) {
		memory(&b, t, cfg)
	}
	targets(&b, t, cfg)
	if len(res.Notes) > 0 {
		b.WriteString("Notes from the run:\n\n")
		for _, n := range res.Notes {
			b.WriteString("- " + n + "\n")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func header(b *strings.Builder, res *suite.Results) {
	cfg := res.Config
	loads := spreadOf(res.LoadAverages)
	fmt.Fprintf(b, "Measured %s on %d × %s, %s RAM; %s, client-go %s, controller-runtime %s, kube-apiserver %s.\n",
		res.Started.Format("2006-01-02"), res.Machine.CPUs, res.Machine.CPUModel, res.Machine.Memory,
		res.Versions.Go, res.Versions.ClientGo, res.Versions.ControllerRuntime, res.Versions.APIServer)
	fmt.Fprintf(b, "%d runs, contenders interleaved, each in its own process; client QPS %g, burst %d for every contender; "+
		"%s exporters (%s per throughput session), %s Pods; 1-minute load average at session starts %s (median %.2f); %s in all.\n\n",
		cfg.Runs, cfg.QPS, cfg.Burst, number(float64(cfg.Objects), 0), number(float64(cfg.Churn()), 0), number(float64(cfg.Pods), 0),
		cell(loads, 2), loads.median, res.Finished.Sub(res.Started).Round(1e9))
	b.WriteString("Cells read `median (min–max)` over the runs; `× best` is the ratio to the best row of the same run.\n\n")
}

func throughput(b *strings.Builder, t table, cfg suite.Config, scenario, title string) {
	rows := suite.Rows(scenario, cfg)
	fmt.Fprintf(b, "### Throughput, %s: events/s until all %s objects are handled\n\n", title, number(float64(cfg.Churn()), 0))
	var out [][]string
	for _, row := range rows {
		line := []string{contenderLabel(row), workers(row)}
		for _, figs := range [][2]string{{suite.FigCreate, suite.FigCreateLag}, {suite.FigUpdate, suite.FigUpdateLag}} {
			k := key{scenario, figs[0], "", row}
			lag := key{scenario, figs[1], "", row}
			line = append(line, cell(spreadOf(t.values(k)), 0), ratioCell(spreadOf(t.ratios(k, rows, true))), cell(spreadOf(scaled(t.values(lag), 1000)), 0))
		}
		out = append(out, line)
	}
	markdownTable(b, []string{"Contender", "Workers", "Create", "× best", "lag ms", "Update", "× best", "lag ms"}, out)
	var writer []float64
	for _, row := range rows {
		writer = append(writer, t.values(key{scenario, suite.FigWriterCreate, "", row})...)
	}
	fmt.Fprintf(b, "The load generator's creates were accepted at %s objects/s (all sessions). "+
		"`lag` is the time from the last write acknowledged to the last object handled: how far behind the contender was when the writes stopped.\n\n", cell(spreadOf(writer), 0))
}

func apiLoad(b *strings.Builder, t table, cfg suite.Config) {
	rows := suite.Rows(suite.ScenarioRealistic, cfg)
	classes := []string{probe.ClassList, probe.ClassWatch, probe.ClassGet, probe.ClassWrite, probe.ClassDiscovery}
	fmt.Fprintf(b, "### API load: requests sent during the realistic run (%s creates + %s updates)\n\n",
		number(float64(cfg.Churn()), 0), number(float64(cfg.Churn()), 0))
	var out [][]string
	for _, row := range rows {
		line := []string{contenderLabel(row), workers(row)}
		for _, class := range classes {
			line = append(line, cell(spreadOf(t.valuesOrZero(key{suite.ScenarioRealistic, suite.FigRequests, class, row})), 0))
		}
		total := t.sumOverClasses(suite.ScenarioRealistic, suite.FigRequests, row, classes)
		line = append(line, cell(spreadOf(total), 0), cell(spreadOf(scaled(total, 1/float64(2*cfg.Churn()))), 2),
			cell(spreadOf(t.values(key{suite.ScenarioRealistic, suite.FigFailures, "", row})), 0))
		out = append(out, line)
	}
	markdownTable(b, []string{"Contender", "Workers", "LIST", "WATCH", "GET (live reads)", "writes", "discovery", "total", "per event", "failed writes"}, out)
	b.WriteString("Counted by a round-tripper on each contender's rest.Config. Every contender writes status with the same " +
		"JSON merge patch of the status subresource, without a resourceVersion; `failed writes` are those the server refused, " +
		"retried with backoff.\n\n")
}

func steady(b *strings.Builder, t table, cfg suite.Config, scenario, objects string) {
	rows := suite.Rows(scenario, cfg)
	fmt.Fprintf(b, "### Latency: update sent → handler call, %d updates/s for %s over %s\n\n",
		cfg.LatencyRate, cfg.LatencyDuration, objects)
	var out [][]string
	for _, row := range rows {
		line := []string{contenderLabel(row), handlerOf(row)}
		for _, fig := range []string{suite.FigLatencyP50, suite.FigLatencyP99} {
			k := key{scenario, fig, "", row}
			line = append(line, cell(spreadOf(scaled(t.values(k), 1000)), 1), ratioCell(spreadOf(t.ratios(k, rows, false))))
		}
		line = append(line, cell(spreadOf(t.values(key{scenario, suite.FigLatencyRate, "", row})), 0))
		out = append(out, line)
	}
	markdownTable(b, []string{"Contender", "Handler", "p50 ms", "× best", "p99 ms", "× best", "updates/s sent"}, out)

	fmt.Fprintf(b, "### Requests per handler call in steady state (during the latency run over %s)\n\n", objects)
	out = nil
	for _, row := range rows {
		line := []string{contenderLabel(row)}
		for _, class := range []string{probe.ClassGet, probe.ClassList, probe.ClassWatch, probe.ClassWrite} {
			line = append(line, cell(spreadOf(t.valuesOrZero(key{scenario, suite.FigSteadyPerCall, class, row})), 3))
		}
		out = append(out, line)
	}
	markdownTable(b, []string{"Contender", "live GETs / call", "LISTs / call", "WATCHes / call", "writes / call"}, out)

	fmt.Fprintf(b, "### Startup with %s present (from the contender's start; process start excluded)\n\n", objects)
	out = nil
	for _, row := range rows {
		line := []string{contenderLabel(row)}
		for _, fig := range []string{suite.FigStartFirst, suite.FigStartAll} {
			k := key{scenario, fig, "", row}
			line = append(line, cell(spreadOf(t.values(k)), 2), ratioCell(spreadOf(t.ratios(k, rows, false))))
		}
		out = append(out, line)
	}
	markdownTable(b, []string{"Contender", "first event s", "× best", "all handled s", "× best"}, out)
}

func memory(b *strings.Builder, t table, cfg suite.Config) {
	rows := suite.Rows(suite.ScenarioMemory, cfg)
	var caching []suite.Row // the raw watch holds no objects: a reference, not a contender here
	for _, r := range rows {
		if r.Contender != contender.RawWatch {
			caching = append(caching, r)
		}
	}
	fmt.Fprintf(b, "### Memory after syncing %s Pods (one process per row; MiB)\n\n", number(float64(cfg.Pods), 0))
	const mib = 1.0 / (1 << 20)
	var out [][]string
	for _, row := range rows {
		line := []string{cacheLabel(row)}
		for _, fig := range []string{suite.FigHeap, suite.FigHeapLive, suite.FigRSS} {
			k := key{suite.ScenarioMemory, fig, "", row}
			ratio := "reference"
			if row.Contender != contender.RawWatch {
				ratio = ratioCell(spreadOf(t.ratios(k, caching, false)))
			}
			line = append(line, cell(spreadOf(scaled(t.values(k), mib)), 1), ratio)
		}
		line = append(line, cell(spreadOf(scaled(t.values(key{suite.ScenarioMemory, suite.FigPeakRSS, "", row}), mib)), 1))
		line = append(line, cell(spreadOf(t.values(key{suite.ScenarioMemory, suite.FigCPU, "", row})), 2))
		out = append(out, line)
	}
	markdownTable(b, []string{"Contender (cache)", "heap in use", "× best", "live heap", "× best", "RSS", "× best", "peak RSS", "CPU s"}, out)
	b.WriteString("Read after the contender handled every Pod, a full GC and returning free memory to the OS: " +
		"`heap in use` is runtime.MemStats.HeapInuse (spans holding objects, fragmentation included), `live heap` is HeapAlloc, " +
		"`RSS` is VmRSS and `peak RSS` VmHWM (usually reached while the initial list is decoded); " +
		"`CPU s` is the process's user and system CPU time from its start to that point (getrusage): what syncing the cache cost.\n\n")
	likeForLike(b, t)
}

// memoryPairs are the like-for-like memory comparisons: handlerkit and
// controller-runtime holding the same information.
var memoryPairs = []struct {
	what   string
	hk, cr suite.Row
}{
	{"managedFields kept: handlerkit WithManagedFields / controller-runtime default",
		suite.Row{Contender: contender.Handlerkit, Variant: contender.VariantKeepManagedFields, Workers: 1, Handler: contender.HandlerNoop},
		suite.Row{Contender: contender.ControllerRuntime, Workers: 1, Handler: contender.HandlerNoop}},
	{"managedFields stripped: handlerkit default / controller-runtime TransformStripManagedFields",
		suite.Row{Contender: contender.Handlerkit, Workers: 1, Handler: contender.HandlerNoop},
		suite.Row{Contender: contender.ControllerRuntime, Variant: contender.VariantStripManagedFields, Workers: 1, Handler: contender.HandlerNoop}},
	{"metadata only: handlerkit WithMetadataOnly / controller-runtime OnlyMetadata",
		suite.Row{Contender: contender.Handlerkit, Variant: contender.VariantMetadataOnly, Workers: 1, Handler: contender.HandlerNoop},
		suite.Row{Contender: contender.ControllerRuntime, Variant: contender.VariantMetadataOnly, Workers: 1, Handler: contender.HandlerNoop}},
}

// likeForLike prints handlerkit's memory and CPU over controller-runtime's,
// per run, for caches that hold the same information.
func likeForLike(b *strings.Builder, t table) {
	b.WriteString("### Memory, like for like (handlerkit's figure over controller-runtime's, per run)\n\n")
	var out [][]string
	for _, p := range memoryPairs {
		line := []string{p.what}
		for _, fig := range []string{suite.FigHeapLive, suite.FigHeap, suite.FigRSS, suite.FigCPU} {
			line = append(line, ratioCell(spreadOf(t.pairRatios(key{suite.ScenarioMemory, fig, "", p.hk}, key{suite.ScenarioMemory, fig, "", p.cr}))))
		}
		out = append(out, line)
	}
	markdownTable(b, []string{"Caches compared", "live heap", "heap in use", "RSS", "CPU time"}, out)
}

func workers(r suite.Row) string {
	if r.Workers == 0 {
		return "—"
	}
	return fmt.Sprint(r.Workers)
}

func handlerOf(r suite.Row) string {
	if r.Contender == contender.RawWatch {
		return "counts events"
	}
	return r.Handler + fmt.Sprintf(", %d workers", r.Workers)
}

// contenderLabel names the row's contender and, when it is not the
// default, its variant.
func contenderLabel(r suite.Row) string {
	if r.Variant == contender.VariantDefault {
		return r.Contender
	}
	return r.Contender + " (" + r.Variant + ")"
}

func cacheLabel(r suite.Row) string {
	switch {
	case r.Contender == contender.RawWatch:
		return "raw watch (caches nothing)"
	case r.Contender == contender.Handlerkit && r.Variant == contender.VariantKeepManagedFields:
		return "handlerkit, WithManagedFields"
	case r.Contender == contender.Handlerkit && r.Variant == contender.VariantMetadataOnly:
		return "handlerkit, WithMetadataOnly"
	case r.Contender == contender.Handlerkit:
		return "handlerkit default (compact; managedFields stripped)"
	case r.Contender == contender.ControllerRuntime && r.Variant == contender.VariantStripManagedFields:
		return "controller-runtime, TransformStripManagedFields (full objects, managedFields stripped)"
	case r.Contender == contender.ControllerRuntime && r.Variant == contender.VariantMetadataOnly:
		return "controller-runtime, OnlyMetadata"
	case r.Contender == contender.ControllerRuntime:
		return "controller-runtime default (full objects, managedFields kept)"
	default:
		return "handwritten (full objects)"
	}
}
