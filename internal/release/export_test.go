package release

import "testing"

// UseStandInBinaries makes Build, for the rest of t, build the stand-ins
// under testdata/standin instead of the two commands: programs that
// cross-compile in seconds, for a test of the image index's platforms whose
// real arm64 build would compile every dependency again (5m44s measured on a
// cold machine). The tests of this package do not run in parallel.
func UseStandInBinaries(t *testing.T) {
	old := binaries
	binaries = []struct{ pkg, path string }{
		{modulePath + "/internal/release/testdata/standin/prometheus-jmx-exporter-operator", OperatorPath},
		{modulePath + "/internal/release/testdata/standin/jmx-attach", JMXAttachPath},
	}
	t.Cleanup(func() { binaries = old })
}
