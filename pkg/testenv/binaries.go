package testenv

import (
	"context"
	"os"
	"strings"

	"github.com/handlerkit/handlerkit/pkg/testenv/testbin"
)

// The binaries the Environment runs are built, cached and found by package
// testbin (which cmd/testenv-build uses without the rest of testenv); these
// are its names as testenv's users know them.

// KubeVersion is the Kubernetes release whose binaries the Environment runs.
const KubeVersion = testbin.KubeVersion

// ContainerdVersion is the containerd release cluster mode runs.
const ContainerdVersion = testbin.ContainerdVersion

// PrometheusVersion is the Prometheus release pkg/testenv/prometheus runs.
const PrometheusVersion = testbin.PrometheusVersion

// EnvBinDir names the environment variable that overrides where the
// control-plane binaries are looked up.
const EnvBinDir = testbin.EnvBinDir

// EnvContainerdDir names the environment variable that overrides where the
// containerd binaries are looked up.
const EnvContainerdDir = testbin.EnvContainerdDir

// EnvPrometheusDir names the environment variable that overrides where the
// Prometheus server is looked up.
const EnvPrometheusDir = testbin.EnvPrometheusDir

// BinDir returns the directory of the control-plane and node binaries.
func BinDir() string { return testbin.BinDir() }

// ContainerdDir returns the directory of the containerd binaries.
func ContainerdDir() string { return testbin.ContainerdDir() }

// PrometheusDir returns the directory of the Prometheus server.
func PrometheusDir() string { return testbin.PrometheusDir() }

// Binary returns the path of one of the binaries testenv runs, building it
// first when it is not cached (see testbin.Binary).
func Binary(ctx context.Context, name string) (string, error) { return testbin.Binary(ctx, name) }

// ControlPlaneBinaries are the binaries every Environment runs.
func ControlPlaneBinaries() []string { return testbin.ControlPlaneBinaries() }

// NodeBinaries are the binaries cluster mode adds.
func NodeBinaries() []string { return testbin.NodeBinaries() }

// PrometheusBinaries are the binaries pkg/testenv/prometheus runs.
func PrometheusBinaries() []string { return testbin.PrometheusBinaries() }

// EnsureBinaries builds the named binaries that are not cached yet.
func EnsureBinaries(ctx context.Context, names ...string) error {
	return testbin.EnsureBinaries(ctx, names...)
}

// RebuildBinaries builds the named binaries even when they are cached.
func RebuildBinaries(ctx context.Context, names ...string) error {
	return testbin.RebuildBinaries(ctx, names...)
}

// DownloadBinarySources downloads the Go modules that building the named
// binaries needs, and builds nothing.
func DownloadBinarySources(ctx context.Context, names ...string) error {
	return testbin.DownloadBinarySources(ctx, names...)
}

// isExecutable says whether path is a file someone may execute.
func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && !info.IsDir() && info.Mode()&0o111 != 0
}

// tail is the last n lines of out, indented.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return "\t" + strings.Join(lines, "\n\t")
}
