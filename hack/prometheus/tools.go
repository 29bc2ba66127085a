//go:build tools

// Package prometheus pins the Prometheus server that pkg/testenv/prometheus
// runs against a test cluster (see pkg/testenv/testbin/build.go and
// cmd/testenv-build).
package prometheus

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
)
