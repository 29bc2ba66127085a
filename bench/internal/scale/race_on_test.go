//go:build race

package scale_test

// raceFlags build the operator as the tests are built, so that `make test`
// (-race -trimpath) links it from packages already compiled.
var raceFlags = []string{"-race"}
