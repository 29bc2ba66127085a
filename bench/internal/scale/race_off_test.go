//go:build !race

package scale_test

// raceFlags build the operator as the tests are built.
var raceFlags []string
