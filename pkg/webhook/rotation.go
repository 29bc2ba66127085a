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

// lookResult says what one look at the Secret did.
type lookResult struct {
	// wrote is the change this replica wrote, changeNone when it wrote none.
	wrote change
	// lost says that another replica changed the Secret first (its update
	// conflicted, or its creation won); its result is read next.
	lost bool
	// wake is when something falls due next, when nothing was written or
	// lost.
	wake time.Time
	// bundleErr is why the configuration's caBundle could not be kept, nil
	// when it was (or when there is none to keep).
	bundleErr error
}

// again reports whether the Secret changed since it was read, so that it
// must be read again.
func (r lookResult) again() bool { return r.wrote != changeNone || r.lost }

// sync reads the Secret, takes the steps that are due, serves the result and
// keeps the configuration's caBundle. It returns when to look again.
func (m *CertManager) sync(ctx context.Context) (time.Time, error) {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	var bundleErr error
	for range maxSteps {
		r, err := m.look(ctx)
		if err != nil {
			return time.Time{}, err
		}
		bundleErr = r.bundleErr
		if !r.again() {
			return r.wake, bundleErr
		}
	}
	// Every replica kept changing the Secret; look again soon.
	return time.Now().Add(gateRetry), bundleErr
}

// look does one read and at most one write of the Secret: it serves what
// it read, keeps the configuration's caBundle, and writes the change that
// is due now, if any.
func (m *CertManager) look(ctx context.Context) (lookResult, error) {
	sec, err := m.client.CoreV1().Secrets(m.o.Namespace).Get(ctx, m.o.SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if m.o.ExternalCerts {
			return lookResult{}, fmt.Errorf("webhook: Secret %s/%s not found: with ExternalCerts another issuer (cert-manager) creates it", m.o.Namespace, m.o.SecretName)
		}
		return m.create(ctx)
	}
	if err != nil {
		return lookResult{}, fmt.Errorf("webhook: reading Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, err)
	}
	if m.adopt(ctx, sec) {
		return lookResult{lost: true}, nil // changed: read it again
	}
	cur, perr := parseState(sec, m.o.ExternalCerts)
	if m.o.ExternalCerts {
		if perr != nil {
			return lookResult{}, fmt.Errorf("webhook: Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, perr)
		}
		m.load(cur)
		return lookResult{}, nil
	}
	var r lookResult
	if perr != nil {
		m.log.WithError(perr).Warn("webhook certificates: the Secret holds no valid certificates; replacing them")
		cur = nil
	} else {
		m.load(cur)
		if m.o.WebhookConfigName != "" {
			r.bundleErr = m.injectBundle(ctx, cur.bundlePEM())
		}
	}
	now := time.Now()
	d := decide(cur, now, m.p)
	if d.change == changeNone {
		r.wake = d.wake
		return r, nil
	}
	if g := d.change.gate(); g != "" {
		if at, err := m.gateOpen(ctx, g, cur, now); err != nil {
			m.log.WithField("step", g).Debugf("webhook certificates: waiting: %v", err)
			r.wake = at
			return r, nil
		}
	}
	if r.lost, err = m.write(ctx, sec, cur, d.change, now, d.reason); err != nil {
		return r, err
	}
	if !r.lost {
		r.wrote = d.change
	}
	return r, nil
}

// write stores change c of cur in sec, the Secret cur was read from (cur
// nil: content that could not be read, which is dropped). The update is
// guarded by sec's resourceVersion: lost reports that another replica
// changed the Secret first. reason is logged.
func (m *CertManager) write(ctx context.Context, sec *corev1.Secret, cur *state, c change, now time.Time, reason string) (lost bool, err error) {
	next, err := apply(cur, c, now, m.p)
	if err != nil {
		return false, err
	}
	upd := sec.DeepCopy()
	if cur == nil {
		// Keep nothing of content we cannot read.
		upd.Data = nil
	}
	next.fill(upd)
	if _, err := m.client.CoreV1().Secrets(m.o.Namespace).Update(ctx, upd, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		if apierrors.IsConflict(err) {
			return true, nil
		}
		return false, fmt.Errorf("webhook: updating Secret %s/%s (%s): %w", m.o.Namespace, m.o.SecretName, c, err)
	}
	m.metrics.writes.WithLabelValues(c.String()).Inc()
	m.log.WithField("step", c.String()).Infof("webhook certificates: %s", reason)
	return false, nil
}

// create makes the Secret. When another replica created it first the
// apiserver says AlreadyExists, and the caller reads theirs.
func (m *CertManager) create(ctx context.Context) (lookResult, error) {
	st, err := apply(nil, changeFresh, time.Now(), m.p)
	if err != nil {
		return lookResult{}, err
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: m.o.Namespace, Name: m.o.SecretName,
		Labels: map[string]string{"app.kubernetes.io/component": "webhook-certificates"}, OwnerReferences: m.owners()}}
	st.fill(sec)
	_, err = m.client.CoreV1().Secrets(m.o.Namespace).Create(ctx, sec, metav1.CreateOptions{FieldManager: FieldManager})
	if len(sec.OwnerReferences) > 0 && m.ownerRefused(err) {
		sec.OwnerReferences = nil
		_, err = m.client.CoreV1().Secrets(m.o.Namespace).Create(ctx, sec, metav1.CreateOptions{FieldManager: FieldManager})
	}
	switch {
	case apierrors.IsAlreadyExists(err):
		return lookResult{lost: true}, nil
	case err != nil:
		return lookResult{}, fmt.Errorf("webhook: creating Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, err)
	}
	m.metrics.writes.WithLabelValues(changeFresh.String()).Inc()
	m.log.WithField("step", changeFresh.String()).Info("webhook certificates: created a CA and a serving certificate")
	return lookResult{wrote: changeFresh}, nil
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
func (m *CertManager) RotateCA(ctx context.Context) error { return m.force(ctx, changeNewCA) }

// RotateServing replaces the serving certificate now with one from the
// same CA. During a CA rotation it fails: the next serving certificate then
// comes from the new CA once callers trust it.
func (m *CertManager) RotateServing(ctx context.Context) error {
	return m.force(ctx, changeRenewServing)
}

// force writes change s now, as if it were due, reading the Secret again
// until no other replica's write comes first.
func (m *CertManager) force(ctx context.Context, s change) error {
	if m.o.ExternalCerts {
		return errors.New("webhook: with ExternalCerts the issuer rotates the certificates")
	}
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	defer m.poke()
	for {
		sec, err := m.client.CoreV1().Secrets(m.o.Namespace).Get(ctx, m.o.SecretName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("webhook: reading Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, err)
		}
		cur, err := parseState(sec, false)
		if err != nil {
			return fmt.Errorf("webhook: Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, err)
		}
		if s == changeRenewServing {
			if issuer := issuerOf(cur.serving.cert, cur.bundle); issuer == nil || !issuer.Equal(cur.signer.cert) {
				return errors.New("webhook: a CA rotation is under way; its serving certificate follows once callers trust the new CA")
			}
		}
		lost, err := m.write(ctx, sec, cur, s, time.Now(), "rotation asked for")
		if err != nil || !lost {
			return err
		}
	}
}
