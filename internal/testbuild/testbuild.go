// Package testbuild builds the commands that tests run. Flags tells tests
// how their own binary was built, so that the commands they build (the
// test-only modules' tools) are compiled with the same flags and share the
// build cache with those modules' own tests; Build builds commands into a
// directory kept between runs, so that a warm run does not link them again.
package testbuild

import "runtime/debug"

// Flags returns the go build flags of this binary that change what the
// compiler produces, as `go test` was given them: -race and -trimpath.
// Commands built with these flags reuse the packages that the tests of
// `make test` (TESTFLAGS) compiled; built with others, a cold machine
// compiles Prometheus', Prometheus Operator's or Helm's packages twice.
func Flags() []string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	var flags []string
	for _, s := range bi.Settings {
		if (s.Key == "-race" || s.Key == "-trimpath") && s.Value == "true" {
			flags = append(flags, s.Key)
		}
	}
	return flags
}
