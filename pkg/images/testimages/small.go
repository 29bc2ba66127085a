package testimages

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

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
// image); a test may pass another jar, such as jvmtest's test agent.
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
	files, err := buildBinaries(ctx, tmp, bins)
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
		Labels:     map[string]string{"org.opencontainers.image.source": "https://github.com/handlerkit/handlerkit"},
	})
}
