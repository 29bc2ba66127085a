package webhook

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
)

// Certificates describes what a CertManager serves.
type Certificates struct {
	// CABundle is every CA callers must trust, as PEM (the caBundle).
	CABundle []byte
	// CAs are the bundle's certificates.
	CAs []*x509.Certificate
	// Signer is the CA that signs new serving certificates; nil with
	// ExternalCerts.
	Signer *x509.Certificate
	// Serving is the serving certificate.
	Serving *x509.Certificate
	// ResourceVersion is the Secret's resourceVersion they were read from.
	ResourceVersion string
}

// CertManager keeps the webhook's CA and serving certificate in one Secret
// of the operator's namespace and serves them. Every replica runs one:
// exactly one creates the Secret (the apiserver refuses the others'
// creation, which then read the winner's), any replica takes a rotation
// step that falls due (the others' updates conflict on the resourceVersion,
// and they read the winner's result), and every replica serves the Secret's
// current serving certificate through GetCertificate, so that a rotation
// needs no restart.
type CertManager struct {
	client  kubernetes.Interface
	o       CertOptions
	p       policy
	log     logrus.FieldLogger
	metrics *certMetrics
	own     ownership

	running atomic.Bool
	wake    chan struct{}

	// syncMu makes a sync and a forced rotation take turns.
	syncMu sync.Mutex

	mu       sync.Mutex
	current  *state
	cert     *tls.Certificate
	err      error
	lastLog  string
	seenHash [sha256.Size]byte // the bundle last seen in the configuration
	seenAt   time.Time         // since when it was seen there, zero if not
}

// GetCertificate returns the serving certificate last read from the Secret,
// for tls.Config.GetCertificate. Before the first read it fails, and so
// does the TLS handshake (the apiserver then applies the webhook's
// failurePolicy).
func (m *CertManager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cert == nil {
		return nil, errNoCertificate
	}
	return m.cert, nil
}

// Ready returns nil once a serving certificate is loaded: a readiness check.
func (m *CertManager) Ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cert == nil {
		if m.err != nil {
			return fmt.Errorf("%w: %v", errNoCertificate, m.err)
		}
		return errNoCertificate
	}
	return nil
}

// Err returns the error of the last look at the Secret and the webhook
// configuration, nil when it succeeded. A missing configuration, for
// example, is reported here (and logged) while the manager retries.
func (m *CertManager) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Certificates returns what the manager serves, and false before the
// Secret was first read.
func (m *CertManager) Certificates() (Certificates, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.current == nil {
		return Certificates{}, false
	}
	return m.current.certificates(), true
}

func (st *state) certificates() Certificates {
	c := Certificates{
		CABundle:        st.bundlePEM(),
		CAs:             slices.Clone(st.bundle),
		Serving:         st.serving.cert,
		ResourceVersion: st.resourceVersion,
	}
	if st.signer != nil {
		c.Signer = st.signer.cert
	}
	return c
}

// load serves st unless it is what is served already.
func (m *CertManager) load(st *state) {
	m.mu.Lock()
	same := m.current != nil && m.current.resourceVersion == st.resourceVersion
	m.mu.Unlock()
	if same {
		return
	}
	cert, err := st.tlsCertificate()
	if err != nil { // parseState checked the pair; this does not happen
		m.log.WithError(err).Error("webhook certificates: cannot serve the Secret's certificate")
		return
	}
	m.mu.Lock()
	m.current, m.cert = st, cert
	m.mu.Unlock()
	m.metrics.expiry.WithLabelValues("serving").Set(float64(st.serving.cert.NotAfter.Unix()))
	if st.signer != nil {
		m.metrics.expiry.WithLabelValues("ca").Set(float64(st.signer.cert.NotAfter.Unix()))
	}
	m.log.WithFields(logrus.Fields{"resourceVersion": st.resourceVersion, "cas": len(st.bundle),
		"servingNotAfter": st.serving.cert.NotAfter.UTC().Format(time.RFC3339)}).Debug("webhook certificates: serving")
}
