// Package metrics serves an operator's Prometheus metrics and its health and
// readiness probes over HTTP, and exposes them to Prometheus in the cluster.
//
// One Server answers /metrics (from a prometheus.Gatherer), /healthz and
// /readyz. It is started on every replica before leader election, so probes
// and scrapes work on stand-by replicas too.
//
// EnsureService creates or updates the <operator>-metrics Service that
// selects the operator's pods (only the leader's, with ScrapeOnlyLeader, through
// the label pkg/leader keeps on the leader pod), and a ServiceMonitor for it
// when the cluster serves monitoring.coreos.com/v1.
package metrics
