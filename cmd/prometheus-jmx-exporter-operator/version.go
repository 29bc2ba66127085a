package main

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version and commit are set at build time (the Makefile's build target and
// the Dockerfile):
//
//	go build -ldflags "-X main.version=v0.1.0 -X main.commit=<sha>"
//
// When they are empty, the module version and the VCS revision that the Go
// toolchain stamps into the binary are used.
var (
	version string
	commit  string
)

// errVersion ends parseFlags after --version printed the version.
var errVersion = errors.New("version printed")

// buildInfo returns the version, the revision and the Go version of this
// binary.
func buildInfo() (ver, rev, goVersion string) {
	ver, rev, goVersion = version, commit, runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if ver == "" && bi.Main.Version != "" {
			ver = bi.Main.Version
		}
		if rev == "" {
			dirty := false
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					dirty = s.Value == "true"
				}
			}
			if rev != "" && dirty {
				rev += "-dirty"
			}
		}
	}
	if ver == "" {
		ver = "(devel)"
	}
	if rev == "" {
		rev = "unknown"
	}
	return ver, rev, goVersion
}

// versionLine is what --version prints.
func versionLine() string {
	ver, rev, goVersion := buildInfo()
	return fmt.Sprintf("prometheus-jmx-exporter-operator %s (commit %s, %s)", ver, rev, goVersion)
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
