package suite

import (
	"errors"
	"io"
	"time"
)

// The scenarios, in the order a run goes through them.
const (
	// ScenarioThroughput creates, then updates, Config.Churn() exporters
	// under a no-op handler, with each worker count.
	ScenarioThroughput = "throughput"
	// ScenarioRealistic is ScenarioThroughput with the realistic handler,
	// and counts the contender's requests.
	ScenarioRealistic = "realistic"
	// ScenarioSteady starts each contender on Objects exporters (startup),
	// then updates them at LatencyRate for LatencyDuration (latency and
	// requests per event in steady state).
	ScenarioSteady = "steady"
	// ScenarioPods starts each contender, with a no-op handler that reads
	// the object, on Pods Pods (startup), then updates their annotations at
	// LatencyRate for LatencyDuration (latency): a built-in kind, which
	// handlerkit caches compact and decodes on every read.
	ScenarioPods = "pods"
	// ScenarioMemory syncs Pods Pods into each contender's cache and reads
	// its heap and RSS.
	ScenarioMemory = "memory"
)

// AllScenarios lists every scenario in run order.
var AllScenarios = []string{ScenarioThroughput, ScenarioRealistic, ScenarioSteady, ScenarioPods, ScenarioMemory}

// Config sizes the benchmark.
type Config struct {
	Objects         int           // exporters per steady workload (startup, latency), and per throughput workload unless ChurnObjects is set
	ChurnObjects    int           // exporters per throughput and realistic workload; 0 for Objects
	Pods            int           // Pods for the memory figures
	Runs            int           // interleaved runs; figures report their median and spread
	Workers         []int         // worker counts for the no-op throughput scenario
	RealWorkers     []int         // worker counts for the realistic throughput scenario
	LatencyRate     int           // steady updates per second
	LatencyDuration time.Duration // how long the steady updates last
	QPS             float32       // client QPS of every contender
	Burst           int           // client burst of every contender
	Drain           time.Duration // wait for the last events of a phase before reading counters
	Scenarios       []string      // which scenarios to run, of AllScenarios
	Contenders      []string      // which contenders to run; empty for all
	Progress        io.Writer     `json:"-"` // one line per session; nil for none
}

// DefaultConfig is the full-size benchmark of issue 17. The realistic
// handler runs with 8 workers only: with one, each event waits for one
// status write's round trip, the same for every design, and 20,000 of them
// would take longer than the rest of the benchmark together.
func DefaultConfig() Config {
	return Config{
		Objects: 10000, Pods: 10000, Runs: 3, Workers: []int{1, 8}, RealWorkers: []int{8},
		LatencyRate: 200, LatencyDuration: 20 * time.Second,
		QPS: 500, Burst: 1000, Drain: 2 * time.Second,
		Scenarios: AllScenarios,
	}
}

func (c Config) validate() error {
	switch {
	case c.ChurnObjects < 0:
		return errors.New("suite: negative churn objects")
	case c.Objects <= 0 || c.Pods <= 0 || c.Runs <= 0 || len(c.Workers) == 0 || len(c.RealWorkers) == 0:
		return errors.New("suite: objects, pods, runs and workers must be positive")
	case c.LatencyRate <= 0 || c.LatencyDuration <= 0:
		return errors.New("suite: latency rate and duration must be positive")
	case c.Drain < 0:
		return errors.New("suite: negative drain")
	case c.QPS <= 0 || c.Burst <= 0:
		return errors.New("suite: QPS and burst must be positive, and the same for every contender")
	}
	return nil
}

// Churn is how many exporters a throughput or realistic session creates
// and updates.
func (c Config) Churn() int {
	if c.ChurnObjects > 0 {
		return c.ChurnObjects
	}
	return c.Objects
}

func (c Config) has(scenario string) bool {
	for _, s := range c.Scenarios {
		if s == scenario {
			return true
		}
	}
	return false
}

// selected keeps the rows of the chosen contenders.
func (c Config) selected(rows []Row) []Row {
	if len(c.Contenders) == 0 {
		return rows
	}
	var out []Row
	for _, r := range rows {
		for _, name := range c.Contenders {
			if r.Contender == name {
				out = append(out, r)
			}
		}
	}
	return out
}
