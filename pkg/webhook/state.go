package webhook

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The keys of the Secret's data. KeyServingCert, KeyServingKey and KeyCABundle
// are the keys of a kubernetes.io/tls Secret as cert-manager writes it, so
// that the same Secret layout serves with ExternalCerts.
const (
	// KeyServingCert holds the serving certificate (PEM).
	KeyServingCert = corev1.TLSCertKey
	// KeyServingKey holds the serving certificate's private key (PEM).
	KeyServingKey = corev1.TLSPrivateKeyKey
	// KeyCABundle holds every CA the webhook's callers must trust (PEM,
	// one or more certificates): the caBundle of the webhook configuration.
	KeyCABundle = "ca.crt"
	// KeySignerCert holds the CA that signs new serving certificates (PEM).
	// It is one of the bundle's certificates.
	KeySignerCert = "ca-signer.crt"
	// KeySignerKey holds the signing CA's private key (PEM).
	KeySignerKey = "ca-signer.key"
)

// The Secret's annotations that record when the last two rotation steps
// happened, so that whichever replica takes the next step knows how long the
// cluster has had to catch up (RFC 3339 times).
const (
	// AnnotationSignerSince is when the current signing CA joined the bundle.
	AnnotationSignerSince = "handlerkit.dev/webhook-ca-signer-since"
	// AnnotationServingSince is when the current serving certificate was
	// stored.
	AnnotationServingSince = "handlerkit.dev/webhook-serving-since"
)

// state is the parsed content of the Secret.
type state struct {
	bundle       []*x509.Certificate
	signer       *keyPair // nil with external certificates
	serving      *keyPair
	signerSince  time.Time
	servingSince time.Time
	// resourceVersion is the Secret's, "" before it is stored.
	resourceVersion string
}

// parseState reads a Secret the manager wrote. external relaxes it to what a
// Secret from another issuer holds: a serving pair, and a bundle if any.
func parseState(s *corev1.Secret, external bool) (*state, error) {
	st := &state{resourceVersion: s.ResourceVersion}
	pair, err := tls.X509KeyPair(s.Data[KeyServingCert], s.Data[KeyServingKey])
	if err != nil {
		return nil, fmt.Errorf("%s and %s: %w", KeyServingCert, KeyServingKey, err)
	}
	serving := &keyPair{cert: pair.Leaf, certPEM: s.Data[KeyServingCert], keyPEM: s.Data[KeyServingKey]}
	if serving.cert == nil {
		if serving.cert, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s: %w", KeyServingCert, err)
		}
	}
	if serving.key, _ = pair.PrivateKey.(crypto.Signer); serving.key == nil {
		return nil, fmt.Errorf("%s: a %T is not a signing key", KeyServingKey, pair.PrivateKey)
	}
	st.serving = serving
	if external {
		if b := s.Data[KeyCABundle]; len(b) > 0 {
			if st.bundle, err = parseCertificates(b); err != nil {
				return nil, fmt.Errorf("%s: %w", KeyCABundle, err)
			}
		}
		return st, nil
	}
	if st.bundle, err = parseCertificates(s.Data[KeyCABundle]); err != nil {
		return nil, fmt.Errorf("%s: %w", KeyCABundle, err)
	}
	signerCerts, err := parseCertificates(s.Data[KeySignerCert])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeySignerCert, err)
	}
	signerKey, err := parsePrivateKey(s.Data[KeySignerKey])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeySignerKey, err)
	}
	signer := &keyPair{cert: signerCerts[0], key: signerKey, certPEM: s.Data[KeySignerCert], keyPEM: s.Data[KeySignerKey]}
	if !signer.cert.IsCA || !matches(signer.cert, signerKey) {
		return nil, fmt.Errorf("%s is not a CA or does not match %s", KeySignerCert, KeySignerKey)
	}
	if !slices.ContainsFunc(st.bundle, signer.cert.Equal) {
		return nil, fmt.Errorf("the signing CA is not in %s", KeyCABundle)
	}
	if issuerOf(serving.cert, st.bundle) == nil {
		return nil, fmt.Errorf("the serving certificate was signed by no CA of %s", KeyCABundle)
	}
	st.signer = signer
	// A missing or garbled time is recorded as now (changeStamp): the next
	// step then waits the whole delay, which is the safe way to be wrong.
	st.signerSince = parseTime(s.Annotations[AnnotationSignerSince])
	st.servingSince = parseTime(s.Annotations[AnnotationServingSince])
	return st, nil
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// fill writes st into s's data and annotations, keeping s's other content.
func (st *state) fill(s *corev1.Secret) {
	s.Type = corev1.SecretTypeTLS
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	s.Data[KeyServingCert] = st.serving.certPEM
	s.Data[KeyServingKey] = st.serving.keyPEM
	s.Data[KeyCABundle] = encodeCertificates(st.bundle)
	s.Data[KeySignerCert] = st.signer.certPEM
	s.Data[KeySignerKey] = st.signer.keyPEM
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[AnnotationSignerSince] = st.signerSince.UTC().Format(time.RFC3339Nano)
	s.Annotations[AnnotationServingSince] = st.servingSince.UTC().Format(time.RFC3339Nano)
}

// bundlePEM is the caBundle the webhook configuration should carry.
func (st *state) bundlePEM() []byte { return encodeCertificates(st.bundle) }

// tlsCertificate is the serving certificate for tls.Config.GetCertificate.
func (st *state) tlsCertificate() (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(st.serving.certPEM, st.serving.keyPEM)
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// policy is what decide needs of the options.
type policy struct {
	caValidity, caRenewBefore           time.Duration
	servingValidity, servingRenewBefore time.Duration
	delay                               time.Duration
	names                               []string
	ips                                 []net.IP
}

// change is one change of the Secret: one rotation step, or the creation
// or repair of its content. (Step, exported, names the two steps that wait
// for the cluster.)
type change int

const (
	changeNone change = iota
	// changeFresh makes a new CA and serving certificate, forgetting the old.
	changeFresh
	// changeNewCA adds a new signing CA to the bundle; the serving
	// certificate stays.
	changeNewCA
	// changeServeNewCA issues a serving certificate from the signing CA,
	// once callers trust it.
	changeServeNewCA
	// changeRenewServing issues a serving certificate from the signing CA,
	// which already signed the current one.
	changeRenewServing
	// changeDropOldCAs leaves only the signing CA in the bundle, once every
	// replica serves a certificate it signed.
	changeDropOldCAs
	// changeStamp records as now the times of the last steps that the Secret
	// lacks (edited by hand, say).
	changeStamp
)

func (s change) String() string {
	switch s {
	case changeFresh:
		return "created"
	case changeNewCA:
		return "new-ca"
	case changeServeNewCA:
		return "serve-new-ca"
	case changeRenewServing:
		return "renew-serving"
	case changeDropOldCAs:
		return "drop-old-ca"
	case changeStamp:
		return "stamp"
	}
	return "none"
}

// gate returns the Step the change waits for, or "" for none.
func (s change) gate() Step {
	switch s {
	case changeServeNewCA:
		return StepServeNewCA
	case changeDropOldCAs:
		return StepDropOldCA
	}
	return ""
}

// decision is what decide found due.
type decision struct {
	change change
	reason string
	// wake is when something falls due next, when change is changeNone.
	wake time.Time
}

// decide finds the next change st needs at now. The rotation of a CA takes
// three steps: the new CA joins the bundle (changeNewCA); after delay, serving
// certificates come from it (changeServeNewCA); after delay again, the old CAs
// leave the bundle (changeDropOldCAs). So a caller that trusts only the old
// bundle never meets a certificate of the new CA, and a replica still
// serving the old certificate is never left untrusted.
func decide(st *state, now time.Time, p policy) decision {
	if st == nil {
		return decision{change: changeFresh, reason: "no valid certificates"}
	}
	if st.signerSince.IsZero() || st.servingSince.IsZero() {
		return decision{change: changeStamp, reason: "the times of the last rotation steps are missing"}
	}
	issuer := issuerOf(st.serving.cert, st.bundle)
	rotating := issuer == nil || !issuer.Equal(st.signer.cert)
	// Expired certificates are trusted by no one: there is no overlap to
	// keep, and waiting would only prolong the outage (an operator that was
	// down for longer than the CA's last months, say).
	if !now.Before(st.signer.cert.NotAfter) || (rotating && !now.Before(st.serving.cert.NotAfter)) {
		return decision{change: changeFresh, reason: "the certificates expired"}
	}
	signerRenew := st.signer.cert.NotAfter.Add(-p.caRenewBefore)
	if !now.Before(signerRenew) {
		return decision{change: changeNewCA, reason: fmt.Sprintf("the CA expires at %s", st.signer.cert.NotAfter.UTC().Format(time.RFC3339))}
	}
	if rotating {
		if at := st.signerSince.Add(p.delay); now.Before(at) {
			return decision{wake: at}
		}
		return decision{change: changeServeNewCA, reason: "a new CA joined the bundle " + p.delay.String() + " or more ago"}
	}
	servingRenew := st.serving.cert.NotAfter.Add(-p.servingRenewBefore)
	switch {
	case !now.Before(servingRenew):
		return decision{change: changeRenewServing, reason: fmt.Sprintf("the serving certificate expires at %s", st.serving.cert.NotAfter.UTC().Format(time.RFC3339))}
	case !sameNames(st.serving.cert, p.names, p.ips):
		return decision{change: changeRenewServing, reason: "the serving certificate's names changed"}
	}
	if len(st.bundle) > 1 {
		if at := st.servingSince.Add(p.delay); now.Before(at) {
			return decision{wake: at}
		}
		return decision{change: changeDropOldCAs, reason: "the serving certificate of the new CA was stored " + p.delay.String() + " or more ago"}
	}
	wake := signerRenew
	if servingRenew.Before(wake) {
		wake = servingRenew
	}
	return decision{wake: wake}
}

// apply returns the state after s. st may be nil only for changeFresh.
func apply(st *state, s change, now time.Time, p policy) (*state, error) {
	next := &state{}
	if st != nil {
		*next = *st
		next.bundle = slices.Clone(st.bundle)
	}
	switch s {
	case changeFresh:
		ca, err := newCA(now, p.caValidity)
		if err != nil {
			return nil, err
		}
		serving, err := newServing(ca, now, p.servingValidity, p.names, p.ips)
		if err != nil {
			return nil, err
		}
		next.bundle = []*x509.Certificate{ca.cert}
		next.signer, next.serving = ca, serving
		next.signerSince, next.servingSince = now, now
	case changeNewCA:
		ca, err := newCA(now, p.caValidity)
		if err != nil {
			return nil, err
		}
		// CAs that have expired are of no use to anyone.
		next.bundle = slices.DeleteFunc(next.bundle, func(c *x509.Certificate) bool { return now.After(c.NotAfter) })
		next.bundle = append(next.bundle, ca.cert)
		next.signer, next.signerSince = ca, now
	case changeServeNewCA, changeRenewServing:
		serving, err := newServing(st.signer, now, p.servingValidity, p.names, p.ips)
		if err != nil {
			return nil, err
		}
		next.serving, next.servingSince = serving, now
	case changeDropOldCAs:
		next.bundle = []*x509.Certificate{st.signer.cert}
	case changeStamp:
		if next.signerSince.IsZero() {
			next.signerSince = now
		}
		if next.servingSince.IsZero() {
			next.servingSince = now
		}
	default:
		return nil, fmt.Errorf("webhook: no step %d", s)
	}
	return next, nil
}

// Step names a rotation step that must wait until the cluster has caught up
// with the one before it.
type Step string

const (
	// StepServeNewCA is the switch of the serving certificate to one signed
	// by a CA that recently joined the bundle. It is safe once every caller
	// of the webhook (the apiserver) trusts the new bundle.
	StepServeNewCA Step = "ServeNewCA"
	// StepDropOldCA is the removal of the old CAs from the bundle. It is
	// safe once every replica serves the new CA's certificate.
	StepDropOldCA Step = "DropOldCA"
)

var errNoCertificate = errors.New("webhook: no serving certificate loaded yet")

// equalBundles reports whether two PEM bundles hold the same certificates
// in the same order, ignoring whitespace between blocks.
func equalBundles(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	ca, err1 := parseCertificates(a)
	cb, err2 := parseCertificates(b)
	return err1 == nil && err2 == nil && slices.EqualFunc(ca, cb, (*x509.Certificate).Equal)
}
