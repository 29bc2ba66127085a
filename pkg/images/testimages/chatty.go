package testimages

import (
	"context"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/handlerkit/handlerkit/pkg/images"
)

// ChattyShellRef is an image whose /bin/sh prints without end (the static
// program internal/chattyshell, also its entrypoint, which waits for
// SIGTERM), run as nobody: the Exec strategy's target that prints more than
// the operator reads.
const ChattyShellRef = "localhost/handlerkit/chatty-shell:v1"

// BuildChattyShell writes the image ChattyShellRef into dir. cacheDir and
// the app are not used: its signature is the JVM images' builders'.
func BuildChattyShell(ctx context.Context, dir, _ string, _ JavaApp) (Archive, error) {
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return Archive{}, err
	}
	defer os.RemoveAll(tmp)
	files, err := buildBinaries(ctx, tmp, []Binary{{Package: modulePath + "/pkg/images/testimages/internal/chattyshell", Path: "/chatty"}})
	if err != nil {
		return Archive{}, err
	}
	files = append(files, images.File{Path: "/bin/sh", Source: files[0].Source, Mode: 0o755})
	layer, err := images.FilesLayer(files...)
	if err != nil {
		return Archive{}, err
	}
	return writeImage(dir, "chatty-shell.tar", images.Spec{Ref: ChattyShellRef, Layers: []v1.Layer{layer},
		Entrypoint: []string{"/chatty"}, User: "65534:65534"})
}
