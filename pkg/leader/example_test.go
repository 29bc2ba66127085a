package leader_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/pkg/leader"
	"github.com/handlerkit/handlerkit/pkg/metrics"
	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// The one-liner: block until this pod leads, for life. Outside a cluster it logs that it skips the election.
func ExampleBecome() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := leader.Become(ctx, "jmx-operator-lock"); err != nil {
		log.Fatal(err)
	}
	// Only the leader gets here; the leader=true label is on its pod.
}

// An operator whose metrics and probes answer on every replica, and whose handlers run only on the leader.
func ExampleNewForLife() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	elector, err := leader.NewForLife(cfg, "jmx-operator-lock", leader.WithRegisterer(prometheus.DefaultRegisterer))
	if err != nil {
		log.Fatal(err)
	}
	op, err := sdk.New(cfg, sdk.WithElector(elector))
	if err != nil {
		log.Fatal(err)
	}
	// Scrape only the leader: the Service selects leader=true as well as the operator's labels.
	if _, err := metrics.EnsureService(context.Background(), cfg, metrics.ServiceOptions{ScrapeOnlyLeader: true}); err != nil {
		log.Print(err) // the operator works without its metrics Service
	}
	if err := op.Watch("v1", "Pod", "", 0); err != nil {
		log.Fatal(err)
	}
	op.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error { return nil }))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := op.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// Lease mode: fast takeover. When the lease is lost, Run stops the handlers and returns ErrLeadershipLost; the
// process exits and Kubernetes restarts it as a stand-by.
func ExampleNewLease() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	elector, err := leader.NewLease(cfg, "jmx-operator", leader.WithLeaseDurations(15*time.Second, 10*time.Second, 2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	op, err := sdk.New(cfg, sdk.WithElector(elector))
	if err != nil {
		log.Fatal(err)
	}
	if err := op.Watch("v1", "Pod", "", 0); err != nil {
		log.Fatal(err)
	}
	op.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error { return nil }))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := op.Run(ctx); errors.Is(err, sdk.ErrLeadershipLost) {
		log.Print("lost the lease; exiting so that a fresh process joins as a stand-by")
		os.Exit(1)
	} else if err != nil {
		log.Fatal(err)
	}
}
