// Command helm-release installs, upgrades or uninstalls a release of a Helm
// chart on the cluster a kubeconfig names, with the Helm Go library's own
// install, upgrade and uninstall actions (what `helm install`, `helm upgrade`
// and `helm uninstall` run), storing releases as Secrets. test/deploy runs it
// against pkg/testenv's API server to prove what Helm does with the chart's
// CRD; it lives in this test-only module so that Helm never enters
// handlerkit's go.mod.
//
//	helm-release -kubeconfig FILE -namespace NS -name RELEASE [-chart DIR] [-values FILE]... install|upgrade|uninstall
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	ri "helm.sh/helm/v4/pkg/release"
	release "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"
)

// valueFiles collects repeated -values flags.
type valueFiles []string

func (v *valueFiles) String() string     { return strings.Join(*v, ",") }
func (v *valueFiles) Set(s string) error { *v = append(*v, s); return nil }

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "helm-release:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("helm-release", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file of the cluster")
	chartDir := fs.String("chart", "", "chart directory (install, upgrade)")
	name := fs.String("name", "prometheus-jmx-exporter-operator", "release name")
	namespace := fs.String("namespace", "default", "release namespace")
	timeout := fs.Duration("timeout", 2*time.Minute, "time limit of the action")
	var files valueFiles
	fs.Var(&files, "values", "values file (YAML), repeatable; later files win")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" || fs.NArg() != 1 {
		return fmt.Errorf("usage: helm-release -kubeconfig FILE [flags] install|upgrade|uninstall")
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = kubeconfig, namespace
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := cfg.Init(flags, *namespace, "secret"); err != nil {
		return err
	}
	if fs.Arg(0) == "uninstall" {
		u := action.NewUninstall(cfg)
		u.Timeout, u.WaitStrategy = *timeout, kube.HookOnlyStrategy
		_, err := u.Run(*name)
		return err
	}
	if *chartDir == "" {
		return fmt.Errorf("-chart is required")
	}
	ch, err := loader.Load(*chartDir)
	if err != nil {
		return err
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
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	switch fs.Arg(0) {
	case "install":
		i := action.NewInstall(cfg)
		i.ReleaseName, i.Namespace, i.Timeout, i.WaitStrategy = *name, *namespace, *timeout, kube.HookOnlyStrategy
		rel, err := i.RunWithContext(ctx, ch, vals)
		if err != nil {
			return err
		}
		return notes(out, rel)
	case "upgrade":
		u := action.NewUpgrade(cfg)
		u.Namespace, u.Timeout, u.WaitStrategy = *namespace, *timeout, kube.HookOnlyStrategy
		rel, err := u.RunWithContext(ctx, *name, ch, vals)
		if err != nil {
			return err
		}
		return notes(out, rel)
	default:
		return fmt.Errorf("unknown action %q: install, upgrade or uninstall", fs.Arg(0))
	}
}

// notes prints the release's NOTES.txt, as helm does after an install or
// upgrade.
func notes(out io.Writer, rel ri.Releaser) error {
	r, ok := rel.(*release.Release)
	if !ok {
		return fmt.Errorf("release of type %T", rel)
	}
	_, err := fmt.Fprintf(out, "release %s revision %d %s\n%s", r.Name, r.Version, r.Info.Status, r.Info.Notes)
	return err
}
