// Command helm-release installs, upgrades or uninstalls a release of a Helm
// chart on the cluster a kubeconfig names, with the Helm Go library's own
// install, upgrade and uninstall actions (what `helm install`, `helm upgrade`
// and `helm uninstall` run), storing releases as Secrets. test/deploy runs it
// against pkg/testenv's API server to prove what Helm does with the chart's
// CRD; it lives in this test-only module so that Helm never enters
// handlerkit's go.mod.
//
// The chart is a directory, a packaged chart (.tgz), or a chart in an OCI
// registry (oci://host/path/name, with -version; -plain-http for a registry
// served without TLS, which a test starts on loopback), fetched the way
// `helm install oci://...` fetches it.
//
//	helm-release -kubeconfig FILE -namespace NS -name RELEASE [-chart DIR|TGZ|oci://REF [-version V] [-plain-http]] [-values FILE]... install|upgrade|uninstall
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/cli"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/registry"
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
	chartRef := fs.String("chart", "", "chart directory, packaged chart or oci:// reference (install, upgrade)")
	version := fs.String("version", "", "the chart's version, for an oci:// chart (default: the newest)")
	plainHTTP := fs.Bool("plain-http", false, "reach an oci:// chart's registry over plain HTTP")
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
	if *chartRef == "" {
		return fmt.Errorf("-chart is required")
	}
	ch, err := loadChart(*chartRef, *version, *plainHTTP)
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

// loadChart loads a chart from a directory, a .tgz, or an OCI registry
// (downloaded into a temporary directory that it removes).
func loadChart(ref, version string, plainHTTP bool) (chart.Charter, error) {
	if !registry.IsOCI(ref) {
		return loader.Load(ref)
	}
	tmp, err := os.MkdirTemp("", "helm-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	opts := []registry.ClientOption{registry.ClientOptWriter(io.Discard),
		registry.ClientOptCredentialsFile(filepath.Join(tmp, "registry.json"))}
	if plainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	rc, err := registry.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	settings := cli.New()
	settings.RepositoryCache = filepath.Join(tmp, "repository")
	settings.ContentCache = filepath.Join(tmp, "content")
	settings.RepositoryConfig = filepath.Join(tmp, "repositories.yaml")
	settings.RegistryConfig = filepath.Join(tmp, "registry.json")
	i := action.NewInstall(action.NewConfiguration())
	i.SetRegistryClient(rc)
	i.Version, i.PlainHTTP = version, plainHTTP
	path, err := i.LocateChart(ref, settings)
	if err != nil {
		return nil, err
	}
	return loader.Load(path)
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
