package webhook

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// backdate is how far before its issue a certificate's NotBefore lies, so
// that an apiserver whose clock runs a little behind the operator's still
// accepts a certificate issued a moment ago.
const backdate = 5 * time.Minute

// keyPair is a certificate with its private key.
type keyPair struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// newCA returns a self-signed CA valid for validity from now. Each CA has a
// subject of its own (the time of issue to the nanosecond), so that the
// certificates of one are never taken for another's during a rotation.
func newCA(now time.Time, validity time.Duration) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("webhook: generating a CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("handlerkit-webhook-ca@%d", now.UnixNano())},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          keyID(&key.PublicKey),
	}
	return sign(tmpl, tmpl, &key.PublicKey, key, key)
}

// newServing returns a serving certificate for names and ips signed by ca,
// valid for validity from now but never beyond the CA itself.
func newServing(ca *keyPair, now time.Time, validity time.Duration, names []string, ips []net.IP) (*keyPair, error) {
	if len(names) == 0 && len(ips) == 0 {
		return nil, errors.New("webhook: a serving certificate needs at least one DNS name or IP address")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("webhook: generating a serving key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	cn := ""
	if len(names) > 0 {
		cn = names[0]
	} else {
		cn = ips[0].String()
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     slices.Clone(names),
		IPAddresses:  slices.Clone(ips),
		SubjectKeyId: keyID(&key.PublicKey),
	}
	return sign(tmpl, ca.cert, &key.PublicKey, key, ca.key)
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, key crypto.Signer, signer crypto.Signer) (*keyPair, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, fmt.Errorf("webhook: signing a certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("webhook: parsing the certificate just signed: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("webhook: encoding a private key: %w", err)
	}
	return &keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("webhook: generating a serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil // never zero
}

// keyID is the subject key identifier of pub: the first 20 bytes of the
// SHA-256 of its encoding (RFC 7093, method 1).
func keyID(pub *ecdsa.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(pub)
	sum := sha256.Sum256(der)
	return sum[:20]
}

// parseCertificates reads every CERTIFICATE block of data, failing on any
// other content or on no certificate at all.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := bytes.TrimSpace(data)
	for len(rest) > 0 {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("not PEM")
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("a PEM block of type %q where a CERTIFICATE belongs", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
		rest = bytes.TrimSpace(rest)
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate")
	}
	return certs, nil
}

// encodeCertificates writes certs as concatenated PEM blocks.
func encodeCertificates(certs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

// parsePrivateKey reads a PKCS#8, SEC 1 (EC) or PKCS#1 (RSA) key.
func parsePrivateKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("not PEM")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("a PEM block of type %q where a private key belongs", block.Type)
	}
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T is not a signing key", key)
	}
	return signer, nil
}

// matches reports whether key is the private half of cert's public key.
func matches(cert *x509.Certificate, key crypto.Signer) bool {
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(cert.PublicKey)
}

// issuerOf returns the certificate of bundle that signed cert, or nil.
func issuerOf(cert *x509.Certificate, bundle []*x509.Certificate) *x509.Certificate {
	for _, ca := range bundle {
		if bytes.Equal(cert.RawIssuer, ca.RawSubject) && cert.CheckSignatureFrom(ca) == nil {
			return ca
		}
	}
	return nil
}

// sameNames reports whether cert names exactly names and ips, in any order.
func sameNames(cert *x509.Certificate, names []string, ips []net.IP) bool {
	if len(cert.DNSNames) != len(names) || len(cert.IPAddresses) != len(ips) {
		return false
	}
	for _, n := range names {
		if !slices.Contains(cert.DNSNames, n) {
			return false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}
