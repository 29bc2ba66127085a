package testbuild

import (
	"runtime/debug"
	"slices"
	"testing"
)

// TestFlagsAreThoseOfThisBinary: Flags names -race and -trimpath exactly
// when this test binary was built with them (make test builds it with both).
func TestFlagsAreThoseOfThisBinary(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info in the test binary")
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	got := Flags()
	for _, flag := range []string{"-race", "-trimpath"} {
		if want := settings[flag] == "true"; slices.Contains(got, flag) != want {
			t.Errorf("Flags() = %q; built with %s: %v", got, flag, want)
		}
	}
	t.Logf("built with %q", got)
}
