package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
)

// userCertificate makes a CA and a serving certificate it signs for names,
// as an admin's own PKI would, and returns the CA's PEM and the serving
// certificate's and key's PEM.
func userCertificate(t *testing.T, names ...string) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(-time.Minute)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e admin CA"},
		NotBefore: now, NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: now, NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// TestHelmUserCertificateIsServedAndTrusted installs the chart with a
// serving certificate of the admin's own (webhook.certificate: a
// kubernetes.io/tls Secret made beforehand, and its CA's PEM): the API
// server calls the webhook, through its Service, on the real node, trusts
// the certificate by the caBundle the chart wrote, and a pod of an AtStart
// exporter is given the agent. The operator writes no Secret of its own and
// has no ClusterRole to patch the configuration.
func TestHelmUserCertificateIsServedAndTrusted(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := newNamespace(t, "e2e-usercert", nil)
	release := "c" + ns[strings.LastIndex(ns, "-")+1:]
	full := release + "-" + operatorName
	service := full + "-webhook"
	caPEM, certPEM, keyPEM := userCertificate(t, service+"."+ns+".svc", service+"."+ns+".svc.cluster.local")
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "admin-webhook-tls"},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	values := chartValues + "webhook:\n  certificate:\n    secretName: admin-webhook-tls\n    caBundle: |\n      " +
		strings.ReplaceAll(strings.TrimSpace(string(caPEM)), "\n", "\n      ") + "\n"
	helm(t, "-namespace", ns, "-name", release, "-chart", filepath.Join(repoRoot, chartDir), "-values", valuesFile(t, values), "install")
	cleanUpRelease(t, ns, release)
	waitDeploymentReady(t, ns, full)

	labels := map[string]string{"app": "usercert"}
	createExporter(t, ns, exporter("usercert", labels, withMode(jmxv1alpha1.InjectionModeAtStart)))
	waitWebhookInjects(t, ns, labels, "usercert")
	servedFromStart(t, ns, "usercert", createPod(t, ns, jvmPod("jvm", labels, testimages.JVMAppRef)).Name, 3*time.Second)

	if _, err := kube.RbacV1().ClusterRoles().Get(ctx, full+"-webhook", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRole %s-webhook: %v, want none (the chart sets the caBundle)", full, err)
	}
	if _, err := kube.CoreV1().Secrets(ns).Get(ctx, full+"-webhook-tls", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Secret %s-webhook-tls: %v, want none (the operator uses the admin's)", full, err)
	}
	helm(t, "-namespace", ns, "-name", release, "uninstall")
}
