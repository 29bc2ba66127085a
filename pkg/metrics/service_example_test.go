package metrics_test

import (
	"context"
	"log"

	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/pkg/metrics"
)

// Create or update "<deployment>-metrics" at every start of every replica. With ScrapeOnlyLeader the Service
// selects only the pod labelled leader=true by package leader; without it every replica is scraped.
func ExampleEnsureService() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	svc, err := metrics.EnsureService(context.Background(), cfg, metrics.ServiceOptions{
		ScrapeOnlyLeader: true,
		ScrapeInterval:   "30s",
	})
	if err != nil {
		log.Print(err) // metrics are still served; only the Service is missing
		return
	}
	log.Printf("metrics Service %s/%s selects %v", svc.Namespace, svc.Name, svc.Spec.Selector)
}
