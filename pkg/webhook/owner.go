package webhook

import (
	"context"
	"slices"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ownership is what a CertManager knows of its Secret's owner (CertOptions.Owner).
type ownership struct {
	refused atomic.Bool // the API server refused the reference once: no more tries
}

// owners returns the owner references a Secret the manager creates carries: CertOptions.Owner, unless the API
// server refused it before.
func (m *CertManager) owners() []metav1.OwnerReference {
	if m.o.Owner == nil || m.own.refused.Load() {
		return nil
	}
	return []metav1.OwnerReference{*m.o.Owner}
}

// ownerRefused says whether err is the API server refusing the owner reference of a write that carried one
// (Forbidden, by an admission plugin such as OwnerReferencesPermissionEnforcement, or Invalid); the first time,
// it logs so and the reference is not tried again, so that the certificates never wait on it.
func (m *CertManager) ownerRefused(err error) bool {
	if err == nil || m.o.Owner == nil || !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) {
		return false
	}
	if m.own.refused.CompareAndSwap(false, true) {
		m.log.WithError(err).Warn("webhook certificates: the API server refused the Secret's owner reference to the operator's Deployment; " +
			"the Secret stays ownerless, and an uninstall leaves it (docs/install.md, Uninstall)")
	}
	return true
}

// adopt adds CertOptions.Owner to the owner references of a Secret the manager keeps but that has none to it (made
// by an earlier version, or before the owner was known). It reports whether the Secret changed since it was read
// (the write, or another replica's first), so that the caller reads it again. A refusal of the reference is
// logged once and never blocks the certificates (ownerRefused); any other failure is tried again at the next
// sync. With ExternalCerts the Secret is the issuer's, and is left alone.
func (m *CertManager) adopt(ctx context.Context, sec *corev1.Secret) bool {
	if m.o.Owner == nil || m.o.ExternalCerts || m.own.refused.Load() ||
		slices.ContainsFunc(sec.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == m.o.Owner.UID }) {
		return false
	}
	upd := sec.DeepCopy()
	upd.OwnerReferences = append(upd.OwnerReferences, *m.o.Owner)
	_, err := m.client.CoreV1().Secrets(m.o.Namespace).Update(ctx, upd, metav1.UpdateOptions{FieldManager: FieldManager})
	switch {
	case err == nil:
		m.log.WithField("owner", m.o.Owner.Kind+"/"+m.o.Owner.Name).Info("webhook certificates: the Secret is owned by the operator's Deployment now; it goes away with it")
		return true
	case apierrors.IsConflict(err):
		return true
	case m.ownerRefused(err):
		return false
	default:
		m.log.WithError(err).Debug("webhook certificates: could not add the Secret's owner reference; trying again at the next sync")
		return false
	}
}
