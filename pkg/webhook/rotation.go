package webhook

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gateRetry is how soon a rotation step whose check said "not yet" is tried
// again.
const gateRetry = time.Second

// maxSteps bounds the steps one sync takes; a fresh Secret needs one.
const maxSteps = 8

// errRetry makes sync read the Secret again at once.
var errRetry = errors.New("retry")

// sync reads the Secret, takes the steps that are due, serves the result and
// keeps the configuration's caBundle. It returns when to look again.
func (m *CertManager) sync(ctx context.Context) (time.Time, error) {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	var (
		wake      time.Time
		bundleErr error
	)
	for range maxSteps {
		var st *state
		var err error
		st, wake, bundleErr, err = m.step(ctx)
		if errors.Is(err, errRetry) {
			continue
		}
		if err != nil {
			return time.Time{}, err
		}
		if st == nil { // a step was taken: look again
			continue
		}
		return wake, bundleErr
	}
	// Every replica kept changing the Secret; look again soon.
	return time.Now().Add(gateRetry), bundleErr
}

// step does one read and at most one write of the Secret. It returns the
// loaded state when nothing more is due now, or nil after a write.
func (m *CertManager) step(ctx context.Context) (st *state, wake time.Time, bundleErr, err error) {
	secrets := m.client.CoreV1().Secrets(m.o.Namespace)
	sec, err := secrets.Get(ctx, m.o.SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if m.o.ExternalCerts {
			return nil, time.Time{}, nil, fmt.Errorf("webhook: Secret %s/%s not found: with ExternalCerts another issuer (cert-manager) creates it", m.o.Namespace, m.o.SecretName)
		}
		return nil, time.Time{}, nil, m.create(ctx)
	}
	if err != nil {
		return nil, time.Time{}, nil, fmt.Errorf("webhook: reading Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, err)
	}
	cur, perr := parseState(sec, m.o.ExternalCerts)
	if m.o.ExternalCerts {
		if perr != nil {
			return nil, time.Time{}, nil, fmt.Errorf("webhook: Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, perr)
		}
		m.load(cur)
		return cur, time.Time{}, nil, nil
	}
	if perr != nil {
		m.log.WithError(perr).Warn("webhook certificates: the Secret holds no valid certificates; replacing them")
		cur = nil
	} else {
		m.load(cur)
		if m.o.WebhookConfigName != "" {
			bundleErr = m.injectBundle(ctx, cur.bundlePEM())
		}
	}
	now := time.Now()
	d := decide(cur, now, m.p)
	if d.step == stepNone {
		return cur, d.wake, bundleErr, nil
	}
	if g := d.step.gate(); g != "" {
		if at, err := m.gateOpen(ctx, g, cur, now); err != nil {
			m.log.WithField("step", g).Debugf("webhook certificates: waiting: %v", err)
			return cur, at, bundleErr, nil
		}
	}
	next, err := apply(cur, d.step, now, m.p)
	if err != nil {
		return nil, time.Time{}, bundleErr, err
	}
	upd := sec.DeepCopy()
	if cur == nil {
		// Keep nothing of content we cannot read.
		upd.Data = nil
	}
	next.fill(upd)
	if _, err := secrets.Update(ctx, upd, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		if apierrors.IsConflict(err) {
			// Another replica changed it first; its result is read next.
			return nil, time.Time{}, bundleErr, errRetry
		}
		return nil, time.Time{}, bundleErr, fmt.Errorf("webhook: updating Secret %s/%s (%s): %w", m.o.Namespace, m.o.SecretName, d.step, err)
	}
	m.metrics.writes.WithLabelValues(d.step.String()).Inc()
	m.log.WithField("step", d.step.String()).Infof("webhook certificates: %s", d.reason)
	return nil, time.Time{}, bundleErr, nil
}

// create makes the Secret. When another replica created it first the
// apiserver says AlreadyExists, and the caller reads theirs.
func (m *CertManager) create(ctx context.Context) error {
	st, err := apply(nil, stepFresh, time.Now(), m.p)
	if err != nil {
		return err
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: m.o.Namespace, Name: m.o.SecretName,
		Labels: map[string]string{"app.kubernetes.io/component": "webhook-certificates"}}}
	st.fill(sec)
	_, err = m.client.CoreV1().Secrets(m.o.Namespace).Create(ctx, sec, metav1.CreateOptions{FieldManager: FieldManager})
	switch {
	case apierrors.IsAlreadyExists(err):
		return errRetry
	case err != nil:
		return fmt.Errorf("webhook: creating Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, err)
	}
	m.metrics.writes.WithLabelValues(stepFresh.String()).Inc()
	m.log.WithField("step", stepFresh.String()).Info("webhook certificates: created a CA and a serving certificate")
	return errRetry
}

// gateOpen returns nil when the gated step may be taken, or why not and
// when to look again.
func (m *CertManager) gateOpen(ctx context.Context, g Step, st *state, now time.Time) (time.Time, error) {
	if g == StepServeNewCA && m.o.WebhookConfigName != "" {
		// The delay since the CA joined the Secret does not count while
		// the configuration did not carry it (a missing configuration, a
		// failed patch): the apiserver trusts only what it was given.
		m.mu.Lock()
		seen, at := m.seenHash == sha256.Sum256(st.bundlePEM()), m.seenAt
		m.mu.Unlock()
		if !seen || at.IsZero() {
			return now.Add(gateRetry), errors.New("the webhook configuration does not carry the new bundle yet")
		}
		if ready := at.Add(m.o.PropagationDelay); now.Before(ready) {
			return ready, fmt.Errorf("the webhook configuration carries the new bundle since %s", at.Format(time.RFC3339))
		}
	}
	if m.o.StepCheck != nil {
		if err := m.o.StepCheck(ctx, g, st.certificates()); err != nil {
			return now.Add(gateRetry), err
		}
	}
	return time.Time{}, nil
}

// RotateCA starts a rotation of the CA now, as if it were due: a new CA
// joins the bundle; the serving certificate follows after
// PropagationDelay, and the old CA leaves the bundle after PropagationDelay
// again (Run takes those steps). It is for tests and for an operator who
// suspects the CA key leaked.
func (m *CertManager) RotateCA(ctx context.Context) error { return m.force(ctx, stepNewCA) }

// RotateServing replaces the serving certificate now with one from the
// same CA. During a CA rotation it fails: the next serving certificate then
// comes from the new CA once callers trust it.
func (m *CertManager) RotateServing(ctx context.Context) error {
	return m.force(ctx, stepRenewServing)
}

func (m *CertManager) force(ctx context.Context, s step) error {
	if m.o.ExternalCerts {
		return errors.New("webhook: with ExternalCerts the issuer rotates the certificates")
	}
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	defer m.poke()
	secrets := m.client.CoreV1().Secrets(m.o.Namespace)
	for {
		sec, err := secrets.Get(ctx, m.o.SecretName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("webhook: reading Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, err)
		}
		cur, err := parseState(sec, false)
		if err != nil {
			return fmt.Errorf("webhook: Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, err)
		}
		if s == stepRenewServing {
			if issuer := issuerOf(cur.serving.cert, cur.bundle); issuer == nil || !issuer.Equal(cur.signer.cert) {
				return errors.New("webhook: a CA rotation is under way; its serving certificate follows once callers trust the new CA")
			}
		}
		next, err := apply(cur, s, time.Now(), m.p)
		if err != nil {
			return err
		}
		upd := sec.DeepCopy()
		next.fill(upd)
		_, err = secrets.Update(ctx, upd, metav1.UpdateOptions{FieldManager: FieldManager})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("webhook: updating Secret %s/%s (%s): %w", m.o.Namespace, m.o.SecretName, s, err)
		}
		m.metrics.writes.WithLabelValues(s.String()).Inc()
		m.log.WithField("step", s.String()).Info("webhook certificates: rotation asked for")
		return nil
	}
}
