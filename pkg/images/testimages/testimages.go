// Package testimages builds the images the handlerkit test node runs, with
// package images and no container engine:
//
//   - Pause: the pod sandbox image (cmd/pause).
//   - Echo: a small static Go HTTP server for Deployments and pod-IP checks.
//   - Agent: ghcr.io/handlerkit/jmx-agent, the image the EphemeralContainer
//     strategy runs: static binaries (jmx-attach, and the operator once it
//     exists) plus an agent jar.
//   - JVMApp: Debian bookworm minbase with openjdk-17-jre-headless and a
//     sample app whose MBeans change over time.
//   - ShelllessJVM: the same JRE and app with only the shared libraries the
//     JRE needs; no shell, no tar, no jps, no JDK.
//   - TmpLinkJVM: JVMApp whose /tmp is a symbolic link to /var/tmp (1777).
//   - Temurin25JVM: JVMApp run by the host's Temurin 25 JDK (Temurin25Home).
//   - Memcached: Debian's memcached binary and the shared libraries it
//     links, run as nobody; the memcached example operator's servers.
//   - MemcachedOperator: the memcached example operator, static.
//   - ChattyShell: a static program that is its entrypoint and its /bin/sh,
//     which prints without end; the Exec strategy's target that prints more
//     than the operator reads.
//
// Archives are written into a directory as docker-archive tarballs; slow
// inputs (the debootstrap root filesystem and its layer) are cached.
package testimages

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/handlerkit/handlerkit/internal/cachedir"
	"github.com/handlerkit/handlerkit/internal/testbuild"
	"github.com/handlerkit/handlerkit/pkg/images"
)

// Image references. They are never pulled: pods use imagePullPolicy: Never.
const (
	// PauseRef is the pod sandbox image, pinned in containerd's CRI config.
	PauseRef = "localhost/handlerkit/pause:v1"
	// EchoRef is the small Go HTTP server image.
	EchoRef = "localhost/handlerkit/echo:v1"
	// AgentRef is the jmx agent image, the CRD's default agent image.
	AgentRef = "ghcr.io/handlerkit/jmx-agent:v0.2.0"
	// JVMAppRef is the Debian-based JVM application image.
	JVMAppRef = "localhost/handlerkit/jvm-app:v1"
	// ShelllessJVMRef is the JVM application image without a shell.
	ShelllessJVMRef = "localhost/handlerkit/jvm-app-shellless:v1"
)

// Paths inside the agent image, fixed because the operator's pod specs and the
// CRD's defaults name them.
const (
	// AgentJarPath is where the java agent jar (the project's agent, agent/) is in the agent image.
	AgentJarPath = "/opt/handlerkit/jmx-agent.jar"
	// JMXAttachPath is where jmx-attach is in the agent image.
	JMXAttachPath = "/usr/local/bin/jmx-attach"
)

// EchoPort is the port the echo server listens on.
const EchoPort = 8080

// Archive is a built image: its reference and the docker-archive holding it.
type Archive struct {
	// Ref is the image reference the archive is tagged with.
	Ref string
	// File is the docker-archive tarball.
	File string
}

// Binary is a Go command built static into an image.
type Binary struct {
	// Package is the Go import path of the main package.
	Package string
	// Path is where the binary goes inside the image.
	Path string
}

// DefaultCacheDir is where slow inputs are kept between runs:
// $XDG_CACHE_HOME/handlerkit/images (or ~/.cache/handlerkit/images).
func DefaultCacheDir() (string, error) {
	dir, err := cachedir.Dir("images")
	if err != nil {
		return "", fmt.Errorf("testimages: %w", err)
	}
	return dir, nil
}

// BuildGoBinary builds the main package pkg static (CGO_ENABLED=0, trimmed)
// into out. It runs the go tool in the current directory, which must be inside
// the module that holds pkg. The binary is kept between runs
// (testbuild.Build), so a rebuild of unchanged sources does not link it again.
func BuildGoBinary(ctx context.Context, pkg, out string) error {
	if err := buildStatic(ctx, "", pkg, out, nil); err != nil {
		return fmt.Errorf("testimages: go build %s: %w", pkg, err)
	}
	return nil
}

// buildStatic builds the main package pkg static and trimmed, running the go
// tool in dir ("" for the current directory) with the caller's environment
// plus env, into out, through a directory kept between runs.
func buildStatic(ctx context.Context, dir, pkg, out string, env []string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".go-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bins, err := testbuild.Build(ctx, dir, tmp, testbuild.ReleaseFlags,
		append(slices.Clone(testbuild.ReleaseEnv), env...), pkg)
	if err != nil {
		return err
	}
	if len(bins) != 1 {
		return fmt.Errorf("%s is %d main packages, want one", pkg, len(bins))
	}
	return os.Rename(bins[0], out)
}

// buildBinaries builds each binary into tmp and returns the files for a layer.
func buildBinaries(ctx context.Context, tmp string, bins []Binary) ([]images.File, error) {
	var files []images.File
	for i, b := range bins {
		if b.Package == "" || !strings.HasPrefix(b.Path, "/") {
			return nil, fmt.Errorf("testimages: binary %d needs a package and an absolute path, got %+v", i, b)
		}
		out := filepath.Join(tmp, fmt.Sprintf("bin-%d", i))
		if err := BuildGoBinary(ctx, b.Package, out); err != nil {
			return nil, err
		}
		files = append(files, images.File{Path: b.Path, Source: out, Mode: 0o755})
	}
	return files, nil
}
