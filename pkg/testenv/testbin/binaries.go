package testbin

import (
	"context"
	"os"
	"path/filepath"

	"github.com/handlerkit/handlerkit/internal/cachedir"
)

// KubeVersion is the Kubernetes release whose binaries the Environment runs.
const KubeVersion = "v1.36.3"

// EnvBinDir names the environment variable that overrides where the
// control-plane binaries are looked up.
const EnvBinDir = "HANDLERKIT_BIN_DIR"

// BinDir returns the directory that holds (or will hold) the control-plane
// binaries: $HANDLERKIT_BIN_DIR, else the per-user cache.
func BinDir() string {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		return dir
	}
	return filepath.Join(cacheBase(), "controlplane", KubeVersion)
}

// cacheBase is ${XDG_CACHE_HOME:-$HOME/.cache}/handlerkit.
// Without a home directory it is .cache/handlerkit under the temporary directory.
func cacheBase() string {
	dir, err := cachedir.Dir()
	if err != nil {
		return filepath.Join(os.TempDir(), ".cache", "handlerkit")
	}
	return dir
}

// Binary returns the path of one of the binaries testenv runs (see
// ControlPlaneBinaries and NodeBinaries), building it from the Go module
// proxy into the cache first when it is missing (see EnsureBinaries).
func Binary(ctx context.Context, name string) (string, error) {
	r, err := recipeFor(name)
	if err != nil {
		return "", err
	}
	path := filepath.Join(r.dir(), name)
	if isExecutable(path) {
		return path, nil
	}
	if err := EnsureBinaries(ctx, name); err != nil {
		return "", err
	}
	return path, nil
}

func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && !info.IsDir() && info.Mode()&0o111 != 0
}
