package operator_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/operator"
)

// The operator in a pod: every namespace, two replicas electing a leader
// through a Lease in the pod's namespace ($POD_NAMESPACE), metrics and probes
// on :8383. main.go does the same from flags.
func ExampleNew() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	op, err := operator.New(cfg, operator.Config{LeaderElection: true})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := op.Run(ctx); err != nil {
		log.Fatal(err) // sdk.ErrLeadershipLost included: restart as a stand-by
	}
}
