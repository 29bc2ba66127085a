// Command helm-render renders a Helm chart the way `helm template
// --include-crds` does, with the Helm Go library, and prints the manifests
// as one YAML stream (the CRDs of crds/ first, then the templates in file
// order). test/deploy runs it to apply the chart to a real API server; it
// lives in this test-only module so that Helm never enters handlerkit's
// go.mod.
//
//	helm-render -chart DIR -name RELEASE -namespace NS [-values FILE]...
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common/util"
	"sigs.k8s.io/yaml"

	"github.com/handlerkit/handlerkit/test/helm/render"
)

// valueFiles collects repeated -values flags.
type valueFiles []string

func (v *valueFiles) String() string     { return strings.Join(*v, ",") }
func (v *valueFiles) Set(s string) error { *v = append(*v, s); return nil }

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "helm-render:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("helm-render", flag.ContinueOnError)
	chartDir := fs.String("chart", "", "chart directory")
	name := fs.String("name", "prometheus-jmx-exporter-operator", "release name")
	namespace := fs.String("namespace", "default", "release namespace")
	var files valueFiles
	fs.Var(&files, "values", "values file (YAML), repeatable; later files win")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *chartDir == "" {
		return fmt.Errorf("-chart is required")
	}
	vals := map[string]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var v map[string]any
		if err := yaml.Unmarshal(data, &v); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		vals = util.MergeTables(v, vals)
	}
	docs, err := render.Chart(*chartDir, *name, *namespace, vals)
	if err != nil {
		return err
	}
	_, err = io.WriteString(out, strings.Join(docs, "\n---\n")+"\n")
	return err
}
