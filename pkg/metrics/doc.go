// Package metrics serves an operator's Prometheus metrics and its health and
// readiness probes over HTTP.
//
// One Server answers /metrics (from a prometheus.Gatherer), /healthz and
// /readyz. It is started on every replica before leader election, so probes
// and scrapes work on stand-by replicas too.
package metrics
