package webhook_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/pkg/webhook"
)

// Every replica of an operator runs the same two things: the CertManager,
// which keeps the Secret and the caBundle, and the Server, which takes its
// certificate from the CertManager at each handshake.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	certs, err := webhook.NewCertManager(client, webhook.CertOptions{
		Namespace:         os.Getenv("POD_NAMESPACE"),
		SecretName:        "jmx-operator-webhook-certs",
		ServiceName:       "jmx-operator-webhook",
		WebhookConfigName: "jmx-operator",
	})
	if err != nil {
		log.Fatal(err)
	}
	srv, err := webhook.NewServer(webhook.ServerOptions{
		GetCertificate: certs.GetCertificate,
		Handlers: map[string]webhook.Handler{
			"/mutate-pods": webhook.HandlerFunc(func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
				return nil // allow unchanged
			}),
		},
		Registerer: prometheus.DefaultRegisterer,
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		if err := certs.Run(ctx); err != nil {
			log.Print(err)
		}
	}()
	if err := srv.Serve(ctx); err != nil {
		log.Fatal(err)
	}
}
