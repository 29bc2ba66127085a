package webhook

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// certMetrics are a CertManager's metrics.
type certMetrics struct {
	expiry *prometheus.GaugeVec
	writes *prometheus.CounterVec
	errors prometheus.Counter
}

func newCertMetrics(reg prometheus.Registerer) (*certMetrics, error) {
	m := &certMetrics{
		expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "handlerkit_webhook_certificate_expiration_timestamp_seconds",
			Help: "When the served webhook certificate (serving) and the CA that signs new ones (ca) expire, in seconds since the epoch.",
		}, []string{"certificate"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handlerkit_webhook_certificate_writes_total",
			Help: "Changes of the webhook certificates' Secret made by this replica, by step: created, new-ca, serve-new-ca, renew-serving, drop-old-ca, stamp.",
		}, []string{"step"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "handlerkit_webhook_certificate_sync_errors_total",
			Help: "Failed looks at the webhook certificates' Secret and webhook configuration (each is retried).",
		}),
	}
	var err error
	if m.expiry, err = register(reg, m.expiry); err != nil {
		return nil, err
	}
	if m.writes, err = register(reg, m.writes); err != nil {
		return nil, err
	}
	if m.errors, err = register(reg, m.errors); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector registered before it under
// the same name (a second manager or server in one process).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("webhook: registering metrics: %w", err)
	}
	return c, nil
}
