// Package report turns suite.Results into the markdown tables that
// `make bench` prints and docs/performance.md records, and into Go
// benchmark-format lines for benchstat.
package report
