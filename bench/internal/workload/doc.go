// Package workload builds the benchmark's objects and drives the API server
// from the outside: it creates, updates and deletes PrometheusJmxExporters
// and Pods as fast as the server takes them, or updates at a steady rate. It
// also holds DesiredStatus, the one piece of logic every realistic
// contender runs.
package workload
