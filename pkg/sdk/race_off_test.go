//go:build !race

package sdk_test

// raceEnabled reports whether the test binary was built with -race, so
// that tests which run it again as a child process know whether the child
// can detect data races.
const raceEnabled = false
