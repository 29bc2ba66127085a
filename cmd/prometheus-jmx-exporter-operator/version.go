package main

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handlerkit/handlerkit/internal/buildinfo"
)

// errVersion ends parseFlags after --version printed the version.
var errVersion = errors.New("version printed")

// buildInfo returns the version, the revision and the Go version of this
// binary (internal/buildinfo: stamped by the Makefile and the Dockerfile).
func buildInfo() (ver, rev, goVersion string) {
	in := buildinfo.Get()
	return in.Version, in.Commit, in.GoVersion
}

// versionLine is what --version prints, and what the operator logs at
// start: version, commit, build date and Go version.
func versionLine() string {
	return buildinfo.Get().Line("prometheus-jmx-exporter-operator")
}

// newBuildInfo is the handlerkit_operator_build_info gauge: always 1, with
// the build's version, revision and Go version as labels, so that a query
// can join them to the operator's other series.
func newBuildInfo() prometheus.Collector {
	ver, rev, goVersion := buildInfo()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "handlerkit_operator_build_info",
		Help:        "The operator's build: always 1, with its version, VCS revision and Go version as labels.",
		ConstLabels: prometheus.Labels{"version": ver, "revision": rev, "goversion": goVersion},
	}, func() float64 { return 1 })
}
