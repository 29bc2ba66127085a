// Package render renders a Helm chart with the Helm Go library, as `helm
// template --include-crds` does.
package render

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
)

// Chart renders the chart in dir for release name in namespace with vals
// over the chart's values, validated against its values.schema.json as
// `helm install` validates them, and returns its YAML documents: the CRDs of
// crds/ first (if it has any), then each template's output in file order
// (NOTES.txt, the partials and empty output left out).
func Chart(dir, name, namespace string, vals map[string]any) ([]string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, err
	}
	rv, err := util.ToRenderValues(ch, vals, common.ReleaseOptions{Name: name, Namespace: namespace, IsInstall: true},
		common.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	rendered, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	var docs []string
	for _, crd := range ch.CRDObjects() {
		docs = append(docs, strings.TrimSpace(string(crd.File.Data)))
	}
	for _, file := range slices.Sorted(maps.Keys(rendered)) {
		base := path.Base(file)
		if base == "NOTES.txt" || strings.HasPrefix(base, "_") {
			continue
		}
		for _, doc := range strings.Split(rendered[file], "\n---") {
			if s := strings.TrimSpace(doc); s != "" && s != "---" {
				docs = append(docs, s)
			}
		}
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("%s rendered nothing", dir)
	}
	return docs, nil
}

// Notes renders the chart's NOTES.txt, as Helm prints it after an install.
func Notes(dir, name, namespace string, vals map[string]any) (string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return "", err
	}
	rv, err := util.ToRenderValues(ch, vals, common.ReleaseOptions{Name: name, Namespace: namespace, IsInstall: true},
		common.DefaultCapabilities)
	if err != nil {
		return "", err
	}
	rendered, err := engine.Render(ch, rv)
	if err != nil {
		return "", err
	}
	return rendered[path.Join(ch.Name(), "templates", "NOTES.txt")], nil
}
