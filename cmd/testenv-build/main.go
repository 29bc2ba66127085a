// Command testenv-build builds the binaries pkg/testenv runs (kube-apiserver
// and etcd; with -node also kube-controller-manager, kube-scheduler, kubelet,
// kube-proxy and containerd with its runc shim and ctr; with -prometheus the
// Prometheus server of pkg/testenv/prometheus) from the Go module proxy into
// the user cache, where testenv looks them up. testenv builds missing
// binaries on first use by itself; this command does it ahead of time, for
// example in a CI image, with exactly the recipe testenv uses.
//
// Usage, in a module that requires github.com/handlerkit/handlerkit (so the
// versions match the testenv your tests import):
//
//	go run github.com/handlerkit/handlerkit/cmd/testenv-build [-node] [-prometheus] [-force|-download] [binary...]
//
// With binary names it builds those; -force rebuilds cached binaries;
// -download only downloads the Go modules that building the missing ones
// needs (`make test` does that while it builds others).
// $HANDLERKIT_BIN_DIR, $HANDLERKIT_CONTAINERD_DIR and
// $HANDLERKIT_PROMETHEUS_DIR override the cache directories, as they do for
// testenv.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/handlerkit/handlerkit/pkg/testenv/testbin"
)

func main() {
	node := flag.Bool("node", false, "also build the cluster-mode binaries (kubelet, controller-manager, scheduler, kube-proxy, containerd)")
	prom := flag.Bool("prometheus", false, "also build the Prometheus server that pkg/testenv/prometheus runs")
	force := flag.Bool("force", false, "rebuild binaries that are already cached")
	download := flag.Bool("download", false, "only download the Go modules that building the missing binaries needs")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: testenv-build [-node] [-prometheus] [-force|-download] [binary...]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	names := binaries(*node, *prom, flag.Args())
	if *download {
		if err := testbin.DownloadBinarySources(ctx, names...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, names, *force); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// binaries returns the names given on the command line, else the control
// plane's, the node's too with -node, and Prometheus with -prometheus.
func binaries(node, prom bool, args []string) []string {
	if len(args) > 0 {
		return args
	}
	names := testbin.ControlPlaneBinaries()
	if node {
		names = append(names, testbin.NodeBinaries()...)
	}
	if prom {
		names = append(names, testbin.PrometheusBinaries()...)
	}
	return names
}

// run builds the binaries and prints where each one is.
func run(ctx context.Context, names []string, force bool) error {
	build := testbin.EnsureBinaries
	if force {
		build = testbin.RebuildBinaries
	}
	if err := build(ctx, names...); err != nil {
		return err
	}
	for _, name := range names {
		path, err := testbin.Binary(ctx, name)
		if err != nil {
			return err
		}
		fmt.Printf("%s\t%s\n", name, filepath.Clean(path))
	}
	return nil
}
