package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// authority is the certificate authority of one Environment. It signs the
// apiserver's serving certificate and every client certificate the
// Environment hands out, and the apiserver trusts it for client auth.
type authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// keyPair is a PEM certificate and key.
type keyPair struct {
	certPEM, keyPEM []byte
}

func newAuthority() (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testenv: generating CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "handlerkit-testenv-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("testenv: signing CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key, certPEM: pemBlock("CERTIFICATE", der)}, nil
}

// serving signs a server certificate valid for the given DNS names and IPs.
func (a *authority) serving(dnsNames []string, ips []net.IP) (keyPair, error) {
	return a.sign(pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth, dnsNames, ips)
}

// client signs a client certificate: the apiserver reads the user name from
// the common name and the groups from the organizations.
func (a *authority) client(user string, groups []string) (keyPair, error) {
	return a.sign(pkix.Name{CommonName: user, Organization: groups}, x509.ExtKeyUsageClientAuth, nil, nil)
}

func (a *authority) sign(subject pkix.Name, usage x509.ExtKeyUsage, dnsNames []string, ips []net.IP) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("testenv: generating key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("testenv: signing certificate for %q: %w", subject.CommonName, err)
	}
	keyPEM, err := marshalKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{certPEM: pemBlock("CERTIFICATE", der), keyPEM: keyPEM}, nil
}

// write stores the pair as dir/name.crt and dir/name.key and returns the paths.
func (k keyPair) write(dir, name string) (certPath, keyPath string, err error) {
	certPath = filepath.Join(dir, name+".crt")
	keyPath = filepath.Join(dir, name+".key")
	if err := os.WriteFile(certPath, k.certPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyPath, k.keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

// newSigningKey returns a PEM private key, for ServiceAccount token signing.
func newSigningKey() ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testenv: generating service-account key: %w", err)
	}
	return marshalKey(key)
}

func marshalKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("testenv: encoding key: %w", err)
	}
	return pemBlock("EC PRIVATE KEY", der), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
