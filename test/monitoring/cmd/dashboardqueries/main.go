// Command dashboardqueries prints, as a JSON array, every PromQL query of the
// Grafana dashboard it reads on stdin with the metric names that Prometheus'
// own parser finds in it (package dashboard). It exits 1, naming the panel,
// when a query does not parse. test/e2e checks each name against the series a
// real Prometheus scraped, and runs each query on it.
//
// Usage:
//
//	dashboardqueries < deploy/grafana/prometheus-jmx-exporter.json
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/handlerkit/handlerkit/test/monitoring/dashboard"
)

func main() {
	data, err := io.ReadAll(os.Stdin)
	if err == nil {
		var qs []dashboard.Query
		if qs, err = dashboard.Queries(data); err == nil {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			err = enc.Encode(qs)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboardqueries:", err)
		os.Exit(1)
	}
}
