package session

import (
	"github.com/handlerkit/handlerkit/bench/internal/contender"
	"github.com/handlerkit/handlerkit/bench/internal/probe"
)

// EnvSpec is the environment variable that carries a child's Spec (JSON).
// A process that finds it set is a child.
const EnvSpec = "HANDLERKIT_BENCH_CHILD_SPEC"

// EnvVerbose, when set, copies every child's stderr to the parent's and
// makes the contenders log at debug level, for debugging a contender.
const EnvVerbose = "HANDLERKIT_BENCH_VERBOSE"

// Spec is what a child runs and how it connects.
type Spec struct {
	contender.Spec
	// Kubeconfig is the path of the kubeconfig the child connects with.
	Kubeconfig string `json:"kubeconfig"`
	// QPS and Burst are set on the contender's rest.Config, the same for
	// every contender.
	QPS   float32 `json:"qps"`
	Burst int     `json:"burst"`
	// Memory makes the child send a "memory" Message once every object
	// has been handled.
	Memory bool `json:"memory,omitempty"`
}

// Message types, in the order a child sends them.
const (
	MsgStarted = "started" // the contender is about to start
	MsgFirst   = "first"   // the first handler call
	MsgReached = "reached" // every object handled at generation Gen
	MsgMemory  = "memory"  // Memory holds the process's memory
	MsgMark    = "mark"    // the answer to "mark NAME"
	MsgFinal   = "final"   // the contender stopped; the last message
)

// Message is one line a child writes.
type Message struct {
	Type string `json:"type"`
	// At is the child's wall clock, Unix nanoseconds; parent and child
	// share the machine's clock.
	At       int64            `json:"at"`
	Gen      int64            `json:"gen,omitempty"`
	Name     string           `json:"name,omitempty"`
	Calls    int64            `json:"calls,omitempty"`
	Failures int64            `json:"failures,omitempty"`
	Requests map[string]int64 `json:"requests,omitempty"`
	Memory   *probe.Memory    `json:"memory,omitempty"`
	// LatencyNs holds the latency samples (see probe.Recorder.Called).
	LatencyNs []int64 `json:"latencyNs,omitempty"`
	Error     string  `json:"error,omitempty"`
}
