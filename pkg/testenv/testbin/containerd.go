package testbin

import (
	"os"
	"path/filepath"
)

// ContainerdVersion is the containerd release cluster mode runs; it must
// match hack/containerd/go.mod (a test checks).
const ContainerdVersion = "v2.2.9"

// EnvContainerdDir names the environment variable that overrides where the
// containerd binaries (containerd, containerd-shim-runc-v2, ctr) are looked up.
const EnvContainerdDir = "HANDLERKIT_CONTAINERD_DIR"

// ContainerdDir returns the directory that holds (or will hold) the containerd
// binaries: $HANDLERKIT_CONTAINERD_DIR, else the per-user cache.
func ContainerdDir() string {
	if dir := os.Getenv(EnvContainerdDir); dir != "" {
		return dir
	}
	return filepath.Join(cacheBase(), "containerd", ContainerdVersion)
}
