//go:build tools

// Package containerd pins the containerd binaries pkg/testenv builds for
// cluster mode (see pkg/testenv/testbin/build.go and cmd/testenv-build): the daemon,
// its runc shim and the ctr client used to import images.
package containerd

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
