package testbin

import (
	"os"
	"path/filepath"
	"strings"
)

// PrometheusVersion is the Prometheus release that pkg/testenv/prometheus
// runs. It is built from the Go module github.com/prometheus/prometheus,
// which tags release 3.y.z as v0.3yy.z (v3.16.0 is v0.316.0).
const PrometheusVersion = "v3.16.0"

// EnvPrometheusDir names the environment variable that overrides where the
// prometheus binary is looked up.
const EnvPrometheusDir = "HANDLERKIT_PROMETHEUS_DIR"

// PrometheusDir returns the directory that holds (or will hold) the
// prometheus binary: $HANDLERKIT_PROMETHEUS_DIR, else the per-user cache.
func PrometheusDir() string {
	if dir := os.Getenv(EnvPrometheusDir); dir != "" {
		return dir
	}
	return filepath.Join(cacheBase(), "prometheus", PrometheusVersion)
}

// PrometheusBinaries names the binaries pkg/testenv/prometheus runs: the
// Prometheus server. It is not part of an Environment; Binary("prometheus")
// builds it on first use, and `testenv-build -prometheus` ahead of time.
func PrometheusBinaries() []string { return []string{"prometheus"} }

// prometheusModuleVersion is the Go module version of PrometheusVersion.
func prometheusModuleVersion() string {
	parts := strings.SplitN(strings.TrimPrefix(PrometheusVersion, "v"), ".", 3)
	if len(parts) != 3 {
		return ""
	}
	minor := parts[1]
	if len(minor) == 1 {
		minor = "0" + minor
	}
	return "v0." + parts[0] + minor + "." + parts[2]
}

// prometheusLDFlags stamp the version prometheus reports (--version and the
// prometheus_build_info series).
func prometheusLDFlags() string {
	const pkg = "github.com/prometheus/common/version"
	return "-s -w -X " + pkg + ".Version=" + strings.TrimPrefix(PrometheusVersion, "v") +
		" -X " + pkg + ".Revision=" + prometheusModuleVersion() + " -X " + pkg + ".Branch=release"
}
