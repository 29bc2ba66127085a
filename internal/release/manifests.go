package release

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/handlerkit/handlerkit/internal/manifest"
)

// RenderManifest renders the kustomization in dir (internal/manifest.Build,
// which builds as `kubectl apply -k` does) into one multi-document YAML
// stream that `kubectl apply -f` installs: the CustomResourceDefinitions
// first, then the Namespace the kustomization sets (which kustomize itself
// does not create), then every other object in the kustomization's order,
// with the agent image (the repository ImageRepository of any registry)
// replaced by imageRef.
func RenderManifest(dir, imageRef string) ([]byte, error) {
	objs, err := manifest.Build(dir)
	if err != nil {
		return nil, fmt.Errorf("release: rendering %s: %w", dir, err)
	}
	var crds, rest []*unstructured.Unstructured
	namespaces := map[string]bool{}
	for _, o := range objs {
		switch o.GetKind() {
		case "CustomResourceDefinition":
			crds = append(crds, o)
			continue
		case "Namespace":
			return nil, fmt.Errorf("release: %s holds Namespace %s: the rendering adds the kustomization's own", dir, o.GetName())
		}
		if ns := o.GetNamespace(); ns != "" {
			namespaces[ns] = true
		}
		if err := setAgentImage(o, imageRef); err != nil {
			return nil, err
		}
		rest = append(rest, o)
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("release: %s holds no CustomResourceDefinition", dir)
	}
	if len(namespaces) != 1 {
		return nil, fmt.Errorf("release: %s puts objects in %d namespaces, want one", dir, len(namespaces))
	}
	var ns string
	for n := range namespaces {
		ns = n
	}
	nsObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": ns}}}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# The PrometheusJmxExporter operator, image %s, rendered from %s by `make release`\n"+
		"# (docs/release.md). Install with: kubectl apply --server-side -f <this file>\n", imageRef, relDeploy(dir))
	for _, o := range append(append(crds, nsObj), rest...) {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, fmt.Errorf("release: %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		buf.WriteString("---\n")
		buf.Write(data)
	}
	return buf.Bytes(), nil
}

// relDeploy is dir from its deploy/ element on, for the header.
func relDeploy(dir string) string {
	if i := strings.LastIndex(dir, "/deploy"); i >= 0 {
		return dir[i+1:]
	}
	return dir
}

// setAgentImage points the containers of o's pod template that run the
// agent image (any registry's .../jmx-agent) at imageRef.
func setAgentImage(o *unstructured.Unstructured, imageRef string) error {
	containers, ok, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if err != nil || !ok {
		return nil
	}
	for _, c := range containers {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		img, _ := m["image"].(string)
		repo := img
		if i := strings.LastIndex(img, ":"); i > strings.LastIndex(img, "/") {
			repo = img[:i]
		}
		if strings.HasSuffix(repo, "/"+ImageRepository) {
			m["image"] = imageRef
		}
	}
	if err := unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers"); err != nil {
		return fmt.Errorf("release: %s %s: %w", o.GetKind(), o.GetName(), err)
	}
	return nil
}

// writeManifest renders dir's install into file, checking that the
// operator's Deployment runs imageRef.
func writeManifest(dir, imageRef, file string) error {
	data, err := RenderManifest(dir, imageRef)
	if err != nil {
		return err
	}
	if !bytes.Contains(data, []byte("image: "+imageRef+"\n")) {
		return fmt.Errorf("release: no container of %s runs the agent image", dir)
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}
