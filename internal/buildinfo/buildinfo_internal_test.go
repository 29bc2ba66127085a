package buildinfo

import (
	"regexp"
	"testing"
)

// TestStampedValuesWin: what the build stamps (-ldflags -X) is reported as
// is; without it, the toolchain's record or "unknown", never empty.
func TestStampedValuesWin(t *testing.T) {
	old := [3]string{version, commit, date}
	defer func() { version, commit, date = old[0], old[1], old[2] }()

	version, commit, date = "", "", ""
	in := Get()
	if in.Version == "" || in.Commit == "" || in.Date == "" || in.GoVersion == "" {
		t.Fatalf("unstamped: %+v, want no empty field", in)
	}
	version, commit, date = "v9.9.9", "abc123", "2026-11-29T05:00:00Z"
	in = Get()
	if in.Version != "v9.9.9" || in.Commit != "abc123" || in.Date != "2026-11-29T05:00:00Z" {
		t.Fatalf("stamped: %+v", in)
	}
	line := in.Line("tool")
	if !regexp.MustCompile(`^tool v9\.9\.9 \(commit abc123, built 2026-11-29T05:00:00Z, go1\.[0-9.]+\S*\)$`).MatchString(line) {
		t.Fatalf("Line = %q", line)
	}
}
