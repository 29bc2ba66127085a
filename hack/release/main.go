// Command release builds and pushes handlerkit's release artefacts without a
// container engine (internal/release, docs/release.md): `make release` runs
// `release build`, `make push` runs `release push`.
//
// Usage:
//
//	go run ./hack/release build [-out dist] [-registry ghcr.io/handlerkit] [-platforms linux/amd64,linux/arm64]
//	go run ./hack/release push  [-out dist] -registry <registry>
//	go run ./hack/release chart [-out dist] [-registry ghcr.io/handlerkit]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/handlerkit/handlerkit/internal/release"
)

const usage = `Usage: release <command> [flags]

Builds handlerkit's release without a container engine (docs/release.md).

Commands:
  build   the multi-architecture agent image (OCI layout tarball), its SPDX
          SBOM, the packaged chart, the single-file install manifests and
          SHA256SUMS, into -out (emptied first if it holds an earlier release)
  push    checks -out's SHA256SUMS, then pushes the image index to
          <registry>/jmx-agent:v<VERSION> and the chart to
          <registry>/charts/prometheus-jmx-exporter-operator:<VERSION>;
          credentials from the default keychain (docker login, helm registry
          login); the registry must be the one the release was built for
  chart   packages the chart alone into -out (as helm package does)

Run 'release <command> -help' for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "release:", err)
		}
		stop()
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return errors.New("no command")
		}
		return flag.ErrHelp
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("release "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", release.DefaultOutDir, "the output directory")
	registry := fs.String("registry", release.DefaultRegistry,
		"registry host[:port] and namespace of the image and the chart, which the install manifests name")
	switch cmd {
	case "build":
		platforms := fs.String("platforms", strings.Join(release.DefaultPlatforms, ","),
			"the image index's platforms, comma-separated linux/<GOARCH>")
		commit := fs.String("commit", "", "the commit stamped into the binaries (default: git rev-parse HEAD)")
		date := fs.String("date", "", "the commit date stamped into the binaries, RFC 3339 (default: HEAD's, UTC)")
		agentJar := fs.String("agent-jar", "", "the java agent jar (default: built from agent/ with Maven, cached)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("build takes no arguments, got %q", fs.Args())
		}
		a, err := release.Build(ctx, release.Options{OutDir: *out, Registry: *registry,
			Platforms: strings.Split(*platforms, ","), Commit: *commit, Date: *date, AgentJar: *agentJar, Log: stderr})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s@%s\n", a.ImageRef, a.IndexDigest)
		for _, f := range append(a.Files(), a.Sums) {
			fmt.Fprintln(stdout, f)
		}
		return nil
	case "push":
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("push takes no arguments, got %q", fs.Args())
		}
		p, err := release.Push(ctx, *out, *registry)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s@%s\n%s@%s\n", p.ImageRef, p.ImageDigest, p.ChartRef, p.ChartDigest)
		return nil
	case "chart":
		chartDir := fs.String("chart", "", "the chart's directory (default: charts/"+release.ChartName+" of the repository)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		dir := *chartDir
		if dir == "" {
			repo, err := release.FindRepo()
			if err != nil {
				return err
			}
			dir = repo + "/charts/" + release.ChartName
		}
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
		file, err := release.PackageChart(dir, *out, *registry)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, file)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}
