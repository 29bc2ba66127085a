// Command memcached-operator is handlerkit's memcached example operator: for
// every Memcached (cache.example.handlerkit.dev/v1alpha1) it runs a
// Deployment of spec.size memcached servers and reports their pods in
// status.nodes. See README.md for the walk-through.
//
// Usage:
//
//	memcached-operator [flags]
//
// Run with --help for the flags. Outside a cluster it uses --kubeconfig, or
// $KUBECONFIG, or ~/.kube/config; in a pod, the pod's ServiceAccount.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/handler"
	"github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/operator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stderr)
	// --help printed the usage, which is a success. Every other error exits
	// non-zero, sdk.ErrLeadershipLost included: the replica then restarts
	// as a stand-by rather than act beside the new leader.
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "memcached-operator:", err)
		os.Exit(1)
	}
}

// run parses args, builds the operator and runs it until ctx ends.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("memcached-operator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		kubeconfig  = fs.String("kubeconfig", "", "kubeconfig file; default $KUBECONFIG, ~/.kube/config, or the in-cluster ServiceAccount")
		namespaces  = fs.String("namespace", os.Getenv("WATCH_NAMESPACE"), "namespaces to watch, comma-separated; empty for all (default $WATCH_NAMESPACE)")
		image       = fs.String("image", handler.DefaultImage, "memcached image the Deployments run")
		metricsAddr = fs.String("metrics-addr", ":8383", `address of /metrics, /healthz and /readyz; "0" disables them`)
		elect       = fs.Bool("leader-elect", false, "elect a leader through a Lease, so that only one replica acts (set it when running more than one)")
		electNS     = fs.String("leader-election-namespace", "", "namespace of the Lease (default $POD_NAMESPACE, or the ServiceAccount's)")
		electID     = fs.String("leader-election-id", operator.Name, "name of the Lease")
		workers     = fs.Int("workers", 1, "how many Memcached objects are handled at once")
		logJSON     = fs.Bool("log-json", false, "log in JSON instead of text")
		verbose     = fs.Bool("v", false, "log at debug level")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: memcached-operator [flags]\n\n"+
			"Runs a Deployment of spec.size memcached servers for every Memcached\n"+
			"(cache.example.handlerkit.dev/v1alpha1) and reports their pods in status.nodes.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	log := logrus.New()
	log.SetOutput(stderr)
	if *logJSON {
		log.SetFormatter(&logrus.JSONFormatter{})
	}
	if *verbose {
		log.SetLevel(logrus.DebugLevel)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	// With no kubeconfig anywhere, this falls back to the in-cluster config.
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("loading the Kubernetes client configuration: %w", err)
	}
	op, err := operator.New(cfg, operator.Config{
		Namespaces:              *namespaces,
		Image:                   *image,
		MetricsAddr:             *metricsAddr,
		LeaderElection:          *elect,
		LeaderElectionNamespace: *electNS,
		LeaderElectionID:        *electID,
		Workers:                 *workers,
		Logger:                  log,
	})
	if err != nil {
		return err
	}
	log.WithFields(logrus.Fields{"namespaces": *namespaces, "image": *image, "leader-elect": *elect}).Info("memcached-operator starting")
	return op.Run(ctx)
}
