package webhook

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// testPolicy is the policy NewCertManager makes of typical options.
func testPolicy(t *testing.T) policy {
	t.Helper()
	m, err := NewCertManager(fake.NewClientset(), CertOptions{
		Namespace: "ops", SecretName: "webhook-certs", ServiceName: "jmx-webhook",
		ExtraDNSNames: []string{"webhook.example"}, ExtraIPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return m.p
}

func TestNewCAIsASelfSignedP256CAValidForItsValidity(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	ca, err := newCA(now, DefaultCAValidity)
	if err != nil {
		t.Fatal(err)
	}
	c := ca.cert
	if !c.IsCA || !c.BasicConstraintsValid || !c.MaxPathLenZero || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("not a leaf-signing CA: IsCA %v, MaxPathLenZero %v, KeyUsage %v", c.IsCA, c.MaxPathLenZero, c.KeyUsage)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
	if !c.NotBefore.Equal(now.Add(-backdate)) || !c.NotAfter.Equal(now.Add(DefaultCAValidity)) {
		t.Errorf("valid %s to %s, want %s to %s", c.NotBefore, c.NotAfter, now.Add(-backdate), now.Add(DefaultCAValidity))
	}
	if k, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("key %T, want ECDSA P-256", c.PublicKey)
	}
	other, err := newCA(now.Add(time.Nanosecond), DefaultCAValidity)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(other.cert.RawSubject, c.RawSubject) {
		t.Errorf("two CAs share the subject %s", c.Subject)
	}
}

func TestServingCertificateNamesTheServiceAndChainsToItsCA(t *testing.T) {
	p := testPolicy(t)
	st, err := apply(nil, changeFresh, time.Now(), p)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(st.signer.cert)
	for _, name := range []string{"jmx-webhook.ops.svc", "jmx-webhook.ops.svc.cluster.local", "webhook.example", "127.0.0.1"} {
		if _, err := st.serving.cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, name := range []string{"jmx-webhook", "jmx-webhook.ops", "other.ops.svc", "127.0.0.2"} {
		if _, err := st.serving.cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err == nil {
			t.Errorf("%s verifies; the certificate should not name it", name)
		}
	}
	s := st.serving.cert
	if s.IsCA || len(s.ExtKeyUsage) != 1 || s.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("IsCA %v, ExtKeyUsage %v; want a server-auth leaf", s.IsCA, s.ExtKeyUsage)
	}
	if got := s.NotAfter.Sub(s.NotBefore); got != DefaultServingValidity+backdate {
		t.Errorf("valid for %s, want %s", got, DefaultServingValidity+backdate)
	}
	if len(st.bundle) != 1 || !st.bundle[0].Equal(st.signer.cert) {
		t.Errorf("the bundle of a fresh state holds %d certificates, want only its CA", len(st.bundle))
	}
}

func TestServingCertificateNeverOutlivesItsCA(t *testing.T) {
	now := time.Now()
	ca, err := newCA(now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newServing(ca, now, 24*time.Hour, []string{"a.b.svc"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !s.cert.NotAfter.Equal(ca.cert.NotAfter) {
		t.Errorf("serving NotAfter %s, want the CA's %s", s.cert.NotAfter, ca.cert.NotAfter)
	}
}

func TestStateRoundTripsThroughTheSecret(t *testing.T) {
	p := testPolicy(t)
	now := time.Now().Truncate(time.Second)
	st, err := apply(nil, changeFresh, now, p)
	if err != nil {
		t.Fatal(err)
	}
	if st, err = apply(st, changeNewCA, now.Add(time.Minute), p); err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", ResourceVersion: "7"}}
	st.fill(sec)
	if sec.Type != corev1.SecretTypeTLS {
		t.Errorf("type %q, want %q", sec.Type, corev1.SecretTypeTLS)
	}
	got, err := parseState(sec, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.bundle) != 2 || !got.bundle[0].Equal(st.bundle[0]) || !got.bundle[1].Equal(st.bundle[1]) {
		t.Errorf("bundle of %d certificates, want the two written in order", len(got.bundle))
	}
	if !got.signer.cert.Equal(st.signer.cert) || !got.serving.cert.Equal(st.serving.cert) || got.resourceVersion != "7" {
		t.Errorf("signer, serving certificate or resourceVersion changed on the way")
	}
	if !got.signerSince.Equal(now.Add(time.Minute)) || !got.servingSince.Equal(now) {
		t.Errorf("times %s, %s; want %s, %s", got.signerSince, got.servingSince, now.Add(time.Minute), now)
	}
	if !equalBundles(sec.Data[KeyCABundle], append([]byte("\n"), bytes.ReplaceAll(sec.Data[KeyCABundle], []byte("-\n-"), []byte("-\n\n-"))...)) {
		t.Error("equalBundles is upset by blank lines between blocks")
	}
	if equalBundles(sec.Data[KeyCABundle], encodeCertificates(st.bundle[:1])) {
		t.Error("equalBundles takes one CA for two")
	}
}

func TestParseStateRefusesSecretsItCannotServeFrom(t *testing.T) {
	p := testPolicy(t)
	now := time.Now()
	st, err := apply(nil, changeFresh, now, p)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := apply(nil, changeFresh, now, p)
	if err != nil {
		t.Fatal(err)
	}
	good := &corev1.Secret{}
	st.fill(good)
	cases := map[string]struct {
		change func(s *corev1.Secret)
		want   string
	}{
		"no serving key":        {func(s *corev1.Secret) { delete(s.Data, KeyServingKey) }, "tls.key"},
		"garbled bundle":        {func(s *corev1.Secret) { s.Data[KeyCABundle] = []byte("junk") }, "ca.crt"},
		"key in the bundle":     {func(s *corev1.Secret) { s.Data[KeyCABundle] = s.Data[KeySignerKey] }, "ca.crt"},
		"no signer key":         {func(s *corev1.Secret) { delete(s.Data, KeySignerKey) }, KeySignerKey},
		"signer key of another": {func(s *corev1.Secret) { s.Data[KeySignerKey] = foreign.signer.keyPEM }, "does not match"},
		"signer not in bundle":  {func(s *corev1.Secret) { s.Data[KeyCABundle] = foreign.signer.certPEM }, "not in"},
		"serving of another CA": {func(s *corev1.Secret) {
			s.Data[KeyServingCert], s.Data[KeyServingKey] = foreign.serving.certPEM, foreign.serving.keyPEM
		}, "signed by no CA"},
		"serving key of another":  {func(s *corev1.Secret) { s.Data[KeyServingKey] = foreign.serving.keyPEM }, "tls.key"},
		"serving is the CA":       {func(s *corev1.Secret) { s.Data[KeySignerCert] = s.Data[KeyServingCert] }, "not a CA"},
		"nothing at all":          {func(s *corev1.Secret) { s.Data = nil }, "tls.crt"},
		"annotations are missing": {func(s *corev1.Secret) { s.Annotations = nil }, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := good.DeepCopy()
			c.change(s)
			_, err := parseState(s, false)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("error %v, want one naming %q", err, c.want)
			}
		})
	}
	// An external issuer's Secret needs only the serving pair.
	ext := &corev1.Secret{Data: map[string][]byte{KeyServingCert: st.serving.certPEM, KeyServingKey: st.serving.keyPEM}}
	if _, err := parseState(ext, true); err != nil {
		t.Errorf("external Secret with only tls.crt and tls.key: %v", err)
	}
}
