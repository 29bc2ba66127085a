// Package suite runs the benchmark: it prepares the workloads on one
// control plane, then runs every contender one after another, each in its
// own process, interleaved over several runs so that the machine's noise
// falls on all of them alike, and collects the Measurements.
package suite
