// Package docslint holds the test that keeps the docs honest: every metric,
// flag and make target that docs/, the README and the chart's README name
// exists in the code (docslint_test.go). It has no code of its own.
package docslint
