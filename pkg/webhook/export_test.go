package webhook

import (
	"net"
	"time"
)

// NewCAForTest returns a new CA as PEM, for the external tests that play
// another issuer.
func NewCAForTest(validity time.Duration) (certPEM, keyPEM []byte, err error) {
	ca, err := newCA(time.Now(), validity)
	if err != nil {
		return nil, nil, err
	}
	return ca.certPEM, ca.keyPEM, nil
}

// NewServingForTest returns a serving certificate signed by the CA given as
// PEM.
func NewServingForTest(caCertPEM, caKeyPEM []byte, validity time.Duration, names []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	certs, err := parseCertificates(caCertPEM)
	if err != nil {
		return nil, nil, err
	}
	key, err := parsePrivateKey(caKeyPEM)
	if err != nil {
		return nil, nil, err
	}
	s, err := newServing(&keyPair{cert: certs[0], key: key}, time.Now(), validity, names, ips)
	if err != nil {
		return nil, nil, err
	}
	return s.certPEM, s.keyPEM, nil
}

// WithoutKeepAlives makes a Server close each connection after one request,
// so that every admission call the apiserver makes is a TLS handshake of
// its own and a moment without trust cannot hide behind a connection
// opened before it.
func WithoutKeepAlives(o ServerOptions) ServerOptions {
	o.noKeepAlives = true
	return o
}
