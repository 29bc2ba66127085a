package images_test

import (
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/handlerkit/handlerkit/pkg/images"
)

// Build an image holding one static binary and write it as a docker archive
// that `ctr images import` (or testenv's LoadImageArchive) loads.
func ExampleBuild() {
	dir, _ := os.MkdirTemp("", "images-example-")
	defer os.RemoveAll(dir)

	layer, err := images.FilesLayer(images.File{Path: "/hello", Data: []byte("#!/bin/true\n"), Mode: 0o755})
	if err != nil {
		fmt.Println(err)
		return
	}
	img, err := images.Build(images.Spec{
		Ref:        "localhost/example/hello:v1",
		Layers:     []v1.Layer{layer},
		Entrypoint: []string{"/hello"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := images.WriteDockerArchive(filepath.Join(dir, "hello.tar"), "localhost/example/hello:v1", img); err != nil {
		fmt.Println(err)
		return
	}
	layers, _ := img.Layers()
	fmt.Println("layers:", len(layers))
	// Output: layers: 1
}
