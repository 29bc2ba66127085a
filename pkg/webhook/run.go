package webhook

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Run keeps the Secret and the configuration in order until ctx ends. It
// watches both, so that a change is served at once, and reads them again
// every ResyncInterval. Errors are logged, reported by Err and retried with
// a growing delay; Run returns nil when ctx ends and an error only when it
// was already running.
func (m *CertManager) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("webhook: CertManager is already running")
	}
	defer m.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	poke := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.poke() },
		UpdateFunc: func(any, any) { m.poke() },
		DeleteFunc: func(any) { m.poke() },
	}
	informers := []cache.SharedIndexInformer{m.secretInformer()}
	if m.o.WebhookConfigName != "" && !m.o.ExternalCerts {
		informers = append(informers, m.configInformer())
	}
	for _, inf := range informers {
		if _, err := inf.AddEventHandler(poke); err != nil {
			return fmt.Errorf("webhook: %w", err)
		}
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	const firstBackoff = 500 * time.Millisecond
	backoff := firstBackoff
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		wake, err := m.sync(ctx)
		if ctx.Err() != nil {
			return nil
		}
		m.report(err)
		next := m.o.ResyncInterval
		if err != nil {
			next, backoff = backoff, min(2*backoff, m.o.ResyncInterval)
		} else {
			backoff = firstBackoff
			if !wake.IsZero() {
				next = min(next, max(time.Until(wake), 0))
			}
		}
		// Since Go 1.23 Reset discards a value the timer sent before.
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return nil
		case <-m.wake:
		case <-timer.C:
		}
	}
}

// poke makes Run look again at once.
func (m *CertManager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// report records err and logs it when it is new.
func (m *CertManager) report(err error) {
	m.mu.Lock()
	m.err = err
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	repeated := msg == m.lastLog
	m.lastLog = msg
	m.mu.Unlock()
	if err == nil {
		return
	}
	m.metrics.errors.Inc()
	if repeated {
		m.log.WithError(err).Debug("webhook certificates: still failing; retrying")
		return
	}
	m.log.WithError(err).Error("webhook certificates: retrying")
}

func (m *CertManager) secretInformer() cache.SharedIndexInformer {
	sel := fields.OneTermEqualSelector("metadata.name", m.o.SecretName).String()
	secrets := m.client.CoreV1().Secrets(m.o.Namespace)
	return cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = sel
			return secrets.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = sel
			return secrets.Watch(ctx, opts)
		},
	}, &corev1.Secret{}, 0, cache.Indexers{})
}

func (m *CertManager) configInformer() cache.SharedIndexInformer {
	sel := fields.OneTermEqualSelector("metadata.name", m.o.WebhookConfigName).String()
	configs := m.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	return cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = sel
			return configs.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = sel
			return configs.Watch(ctx, opts)
		},
	}, &admissionregistrationv1.MutatingWebhookConfiguration{}, 0, cache.Indexers{})
}
