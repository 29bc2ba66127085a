package suite

import (
	"fmt"
	"time"
)

// Figures: what a Measurement measures. The unit is in the name's comment.
const (
	FigCreate        = "create"          // events/s until every created object was handled
	FigUpdate        = "update"          // events/s until every updated object was handled
	FigWriterCreate  = "writer-create"   // objects/s the API server accepted creates at
	FigCreateLag     = "create-lag"      // seconds from the last create acknowledged to every object handled
	FigUpdateLag     = "update-lag"      // seconds from the last update acknowledged to every object handled
	FigRequests      = "requests"        // requests in a realistic churn session, by class (Class)
	FigFailures      = "failures"        // failed status writes in a realistic churn session
	FigSteadyPerCall = "steady-per-call" // requests per handler call in steady state, by class
	FigLatencyP50    = "latency-p50"     // seconds from an update being sent to the handler call
	FigLatencyP99    = "latency-p99"     // seconds
	FigLatencyRate   = "latency-rate"    // updates/s actually sent
	FigStartFirst    = "startup-first"   // seconds from the contender's start to its first handler call
	FigStartAll      = "startup-all"     // seconds from the contender's start to every object handled
	FigHeap          = "heap"            // bytes of heap spans in use after sync (runtime.MemStats.HeapInuse)
	FigHeapLive      = "heap-live"       // bytes of live heap objects after sync (HeapAlloc)
	FigRSS           = "rss"             // bytes resident after sync
	FigPeakRSS       = "peak-rss"        // highest bytes resident
	FigCPU           = "cpu"             // CPU seconds (user + system) the process used until it read its memory
)

// Row names what was measured: a contender, its cache variant, its worker
// count (0 when it has none) and its handler.
type Row struct {
	Contender string `json:"contender"`
	Variant   string `json:"variant,omitempty"`
	Workers   int    `json:"workers,omitempty"`
	Handler   string `json:"handler"`
}

// Measurement is one figure of one row in one run.
type Measurement struct {
	Scenario string  `json:"scenario"`
	Figure   string  `json:"figure"`
	Class    string  `json:"class,omitempty"`
	Row      Row     `json:"row"`
	Run      int     `json:"run"`
	Value    float64 `json:"value"`
}

// Results is everything one benchmark measured.
type Results struct {
	Config       Config        `json:"config"`
	Machine      Machine       `json:"machine"`
	Versions     Versions      `json:"versions"`
	Started      time.Time     `json:"started"`
	Finished     time.Time     `json:"finished"`
	LoadAverages []float64     `json:"loadAverages"` // 1-minute load average at each session's start
	Measurements []Measurement `json:"measurements"`
	// Notes are things that went wrong without spoiling a figure, such as
	// a contender that returned an error while shutting down.
	Notes []string `json:"notes,omitempty"`
}

func (r *Results) add(scenario, figure string, row Row, run int, value float64) {
	r.Measurements = append(r.Measurements, Measurement{Scenario: scenario, Figure: figure, Row: row, Run: run, Value: value})
}

func (r *Results) addClass(scenario, figure, class string, row Row, run int, value float64) {
	r.Measurements = append(r.Measurements, Measurement{Scenario: scenario, Figure: figure, Class: class, Row: row, Run: run, Value: value})
}

// String labels the row for tables and logs.
func (r Row) String() string {
	s := r.Contender
	if r.Variant != "" {
		s += " (" + r.Variant + ")"
	}
	if r.Workers > 0 {
		s += fmt.Sprintf(" workers=%d", r.Workers)
	}
	return s
}
