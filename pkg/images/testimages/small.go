package testimages

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/handlerkit/handlerkit/pkg/images"
)

const modulePath = "github.com/handlerkit/handlerkit"

// writeImage builds spec and writes it as a docker archive named file in dir.
func writeImage(dir, file string, spec images.Spec) (Archive, error) {
	img, err := images.Build(spec)
	if err != nil {
		return Archive{}, err
	}
	out := filepath.Join(dir, file)
	if err := images.WriteDockerArchive(out, spec.Ref, img); err != nil {
		return Archive{}, err
	}
	return Archive{Ref: spec.Ref, File: out}, nil
}

// goImage builds one static Go binary into an image whose entrypoint it is.
func goImage(ctx context.Context, dir, file, ref string, bin Binary, spec images.Spec) (Archive, error) {
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return Archive{}, err
	}
	defer os.RemoveAll(tmp)
	files, err := buildBinaries(ctx, tmp, []Binary{bin})
	if err != nil {
		return Archive{}, err
	}
	layer, err := images.FilesLayer(files...)
	if err != nil {
		return Archive{}, err
	}
	spec.Ref = ref
	spec.Layers = []v1.Layer{layer}
	spec.Entrypoint = []string{bin.Path}
	return writeImage(dir, file, spec)
}

// BuildPause writes the pod sandbox image (PauseRef) into dir.
func BuildPause(ctx context.Context, dir string) (Archive, error) {
	return goImage(ctx, dir, "pause.tar", PauseRef,
		Binary{Package: modulePath + "/cmd/pause", Path: "/pause"}, images.Spec{})
}

// BuildEcho writes the HTTP echo server image (EchoRef) into dir. The server
// listens on EchoPort and runs as an unprivileged user.
func BuildEcho(ctx context.Context, dir string) (Archive, error) {
	return goImage(ctx, dir, "echo.tar", EchoRef,
		Binary{Package: modulePath + "/pkg/images/testimages/internal/echoserver", Path: "/echoserver"},
		images.Spec{Cmd: []string{"-listen", ":" + strconv.Itoa(EchoPort)}, User: "65534:65534"})
}

// DefaultAgentBinaries lists the static binaries the agent image carries.
// The operator binary joins this list once cmd/prometheus-jmx-exporter-operator
// exists; pass it through BuildAgent's bins until then.
func DefaultAgentBinaries() []Binary {
	return []Binary{{Package: modulePath + "/cmd/jmx-attach", Path: JMXAttachPath}}
}

// OperatorBinary is the operator command, for callers that add it to the
// agent image's binaries.
func OperatorBinary() Binary {
	return Binary{Package: modulePath + "/cmd/prometheus-jmx-exporter-operator",
		Path: "/usr/local/bin/prometheus-jmx-exporter-operator"}
}

// BuildAgent writes the agent image (AgentRef) into dir: the given static
// binaries plus agentJar at AgentJarPath. Its entrypoint is jmx-attach.
// agentJar is the project's agent (jvmtest.AgentJar, as in the production
// image); a test may pass another jar, such as jvmtest's test agent. It
// works from any module that requires handlerkit: handlerkit's own commands
// (DefaultAgentBinaries, OperatorBinary) are built in handlerkit's module,
// where the go tool of the current directory finds it (a replace
// directive's directory, or the module cache); binaries of other modules are
// built in the current directory, which must be inside a module that
// requires them.
func BuildAgent(ctx context.Context, dir, agentJar string, bins []Binary) (Archive, error) {
	if agentJar == "" {
		return Archive{}, fmt.Errorf("testimages: agent image needs an agent jar")
	}
	if len(bins) == 0 {
		return Archive{}, fmt.Errorf("testimages: agent image needs at least one binary")
	}
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return Archive{}, err
	}
	defer os.RemoveAll(tmp)
	files, err := buildAgentBinaries(ctx, tmp, bins)
	if err != nil {
		return Archive{}, err
	}
	files = append(files, images.File{Path: AgentJarPath, Source: agentJar, Mode: 0o644})
	layer, err := images.FilesLayer(files...)
	if err != nil {
		return Archive{}, err
	}
	return writeImage(dir, "jmx-agent.tar", images.Spec{
		Ref:        AgentRef,
		Layers:     []v1.Layer{layer},
		Entrypoint: []string{JMXAttachPath},
		// As the Dockerfile's USER: the operator's Deployment runs this image
		// with runAsNonRoot and, in the chart, no fixed uid, so the image
		// must name a non-root user; the ephemeral containers always set
		// their own.
		User:   "65532:65532",
		Labels: map[string]string{"org.opencontainers.image.source": "https://github.com/handlerkit/handlerkit"},
	})
}

// buildAgentBinaries builds each binary into tmp and returns the files for
// a layer: handlerkit's own packages in handlerkit's module directory,
// others in the current directory.
func buildAgentBinaries(ctx context.Context, tmp string, bins []Binary) ([]images.File, error) {
	var (
		files  []images.File
		ownDir string
	)
	for i, b := range bins {
		if b.Package == "" || !strings.HasPrefix(b.Path, "/") {
			return nil, fmt.Errorf("testimages: binary %d needs a package and an absolute path, got %+v", i, b)
		}
		out := filepath.Join(tmp, fmt.Sprintf("bin-%d", i))
		dir := "" // the current directory
		if b.Package == modulePath || strings.HasPrefix(b.Package, modulePath+"/") {
			if ownDir == "" {
				var err error
				if ownDir, err = handlerkitModuleDir(ctx); err != nil {
					return nil, err
				}
			}
			dir = ownDir
		}
		if err := goBuildIn(ctx, dir, b.Package, out); err != nil {
			return nil, err
		}
		files = append(files, images.File{Path: b.Path, Source: out, Mode: 0o755})
	}
	return files, nil
}

// handlerkitModuleDir returns the directory of handlerkit's module source as
// the go tool of the current directory resolves it: this module itself, a
// replace directive's directory, or the module cache.
func handlerkitModuleDir(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", modulePath)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", fmt.Errorf("testimages: find the source of %s from the current directory (is it inside a module that requires it?): go list -m: %v\n%s",
			modulePath, err, stderr.String())
	}
	return dir, nil
}

// goBuildIn builds the main package pkg static (CGO_ENABLED=0, trimmed)
// into out, running the go tool in dir, with dir's go.mod and go.sum as
// they are, or in the current directory, as the caller set it up, when dir
// is "". Like BuildGoBinary, it keeps the binary between runs.
func goBuildIn(ctx context.Context, dir, pkg, out string) error {
	var env []string
	if dir != "" {
		env = []string{"GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false"}
	}
	if err := buildStatic(ctx, dir, pkg, out, env); err != nil {
		return fmt.Errorf("testimages: go build %s in %s: %w", pkg, cmp.Or(dir, "the current directory"), err)
	}
	return nil
}
