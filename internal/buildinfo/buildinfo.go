// Package buildinfo is the one version of a release: the project's
// binaries print it (--version), log it at start and export it as a
// build_info metric, and the image, the chart and the manifests carry the
// same (the VERSION file at the repository's root; TestOneVersion in
// internal/buildinfo keeps them equal).
//
// The Makefile and the Dockerfile stamp it at build:
//
//	go build -ldflags "-X github.com/handlerkit/handlerkit/internal/buildinfo.version=v0.2.0 \
//	  -X github.com/handlerkit/handlerkit/internal/buildinfo.commit=<sha> \
//	  -X github.com/handlerkit/handlerkit/internal/buildinfo.date=<RFC 3339>"
//
// Unstamped (go build, go run, go test), the module version and the VCS
// revision and time that the Go toolchain records are used.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Stamped at build with -ldflags -X (see the package doc).
var (
	version string
	commit  string
	date    string
)

// Info is a binary's build.
type Info struct {
	// Version is the release (v0.2.0), or "(devel)" for a build that was
	// not stamped and has no module version.
	Version string
	// Commit is the VCS revision, with "-dirty" when the tree had changes,
	// or "unknown".
	Commit string
	// Date is when the binary was built (or its commit made, when the
	// build was not stamped), RFC 3339, or "unknown".
	Date string
	// GoVersion is the Go toolchain's version.
	GoVersion string
}

// Get returns this binary's build.
func Get() Info {
	in := Info{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		var rev, at string
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if in.Commit == "" && rev != "" {
			in.Commit = rev
			if dirty {
				in.Commit += "-dirty"
			}
		}
		if in.Date == "" {
			in.Date = at
		}
	}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	if in.Date == "" {
		in.Date = "unknown"
	}
	return in
}

// Line is what a binary called name prints for --version.
func (in Info) Line(name string) string {
	return fmt.Sprintf("%s %s (commit %s, built %s, %s)", name, in.Version, in.Commit, in.Date, in.GoVersion)
}
