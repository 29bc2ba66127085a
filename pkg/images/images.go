// Package images builds OCI container images without a container engine:
// layers come from root filesystem directories, from individual files or from
// existing layer tarballs, and finished images are written as docker-archive
// or OCI-layout tarballs that containerd (`ctr images import`) loads directly.
//
// Nothing here talks to a registry or a daemon, so tests can build the exact
// images they run and tag them for imagePullPolicy: Never.
package images

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Spec describes an image: its reference, its layers (lowest first) and the
// runtime configuration a container started from it gets.
type Spec struct {
	// Ref is the image reference, for example
	// "ghcr.io/handlerkit/jmx-agent:v0.2.0". It must carry a tag so that the
	// kubelet finds it by name with imagePullPolicy: Never.
	Ref string
	// Layers are applied in order; later layers win.
	Layers []v1.Layer
	// Entrypoint and Cmd become the image's ENTRYPOINT and CMD.
	Entrypoint []string
	Cmd        []string
	// Env holds KEY=value entries. When it sets no PATH, a standard PATH is added.
	Env []string
	// WorkingDir is the initial working directory; empty means "/".
	WorkingDir string
	// User is the user (name or uid[:gid]) the process runs as; empty means root.
	User string
	// Labels are attached to the image configuration.
	Labels map[string]string
}

// defaultPath is what container runtimes assume when an image sets no PATH.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Build assembles the image described by spec. The configuration gets a fixed
// creation time so that the same inputs give the same image digest.
func Build(spec Spec) (v1.Image, error) {
	if _, err := ParseTag(spec.Ref); err != nil {
		return nil, err
	}
	if len(spec.Layers) == 0 {
		return nil, fmt.Errorf("images: %s has no layers", spec.Ref)
	}
	if len(spec.Entrypoint) == 0 && len(spec.Cmd) == 0 {
		return nil, fmt.Errorf("images: %s has neither entrypoint nor cmd", spec.Ref)
	}
	img, err := mutate.AppendLayers(empty.Image, spec.Layers...)
	if err != nil {
		return nil, fmt.Errorf("images: %s: appending layers: %w", spec.Ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("images: %s: reading config: %w", spec.Ref, err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint = spec.Entrypoint
	cf.Config.Cmd = spec.Cmd
	cf.Config.Env = withPath(spec.Env)
	cf.Config.WorkingDir = spec.WorkingDir
	cf.Config.User = spec.User
	cf.Config.Labels = spec.Labels
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("images: %s: writing config: %w", spec.Ref, err)
	}
	return img, nil
}

func withPath(env []string) []string {
	for _, kv := range env {
		if len(kv) >= 5 && kv[:5] == "PATH=" {
			return env
		}
	}
	return append([]string{defaultPath}, env...)
}

// ParseTag parses ref as a tagged image reference and rejects digests and
// references without an explicit tag: the kubelet only finds a locally
// imported image without pulling when the pod names the same tag.
func ParseTag(ref string) (name.Tag, error) {
	if ref == "" {
		return name.Tag{}, errors.New("images: empty image reference")
	}
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return name.Tag{}, fmt.Errorf("images: reference %q needs an explicit registry/repository:tag: %w", ref, err)
	}
	return tag, nil
}
