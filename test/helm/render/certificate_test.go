package render

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// testCAPEM is the PEM of a self-signed CA made for the test.
func testCAPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// TestUserCertificateChoosesItsObjectsAndFlags: with webhook.certificate (a
// kubernetes.io/tls Secret of the user's and its CA's PEM) the operator
// reads that Secret (--webhook-secret, --webhook-external-certs=true) under
// a read-only Role on it, the configuration carries the CA as its caBundle
// (base64 of the PEM given as plain text), and there is no ClusterRole to
// patch the caBundle and nothing of cert-manager. Half of it, both with
// certManager, or a caBundle that is not PEM, fail the install.
func TestUserCertificateChoosesItsObjectsAndFlags(t *testing.T) {
	const full = "prometheus-jmx-exporter-operator"
	ca := testCAPEM(t)
	indented := "      " + strings.ReplaceAll(strings.TrimSpace(ca), "\n", "\n      ")
	objs := render(t, "webhook:\n  certificate:\n    secretName: my-webhook-tls\n    caBundle: |\n"+indented+"\n")
	for _, want := range []string{"--webhook-secret=my-webhook-tls", "--webhook-external-certs=true"} {
		if !slices.Contains(args(t, objs), want) {
			t.Errorf("args %v lack %s", args(t, objs), want)
		}
	}
	mwc := find(t, objs, "MutatingWebhookConfiguration")
	hooks, _ := mwc.get("webhooks").([]any)
	if len(hooks) != 1 {
		t.Fatalf("webhooks %v", hooks)
	}
	got, _ := hooks[0].(map[string]any)["clientConfig"].(map[string]any)["caBundle"].(string)
	if pemData, err := base64.StdEncoding.DecodeString(got); err != nil || strings.TrimSpace(string(pemData)) != strings.TrimSpace(ca) {
		t.Errorf("caBundle %q (%v), want the base64 of the CA's PEM", got, err)
	}
	if mwc.get("metadata", "annotations") != nil {
		t.Errorf("annotations %v: nothing of cert-manager", mwc.get("metadata", "annotations"))
	}
	for _, k := range []string{"Certificate", "Issuer"} {
		if kinds(objs)[k] != 0 {
			t.Errorf("%d %s", kinds(objs)[k], k)
		}
	}
	sawRole := false
	for _, o := range objs {
		name, _ := o.get("metadata", "name").(string)
		switch {
		case o.kind() == "ClusterRole" && name == full+"-webhook":
			t.Error("a ClusterRole to patch the caBundle, which the chart sets")
		case o.kind() == "Role" && name == full+"-webhook":
			sawRole = true
			want := []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"},
				"resourceNames": []any{"my-webhook-tls"}, "verbs": []any{"get", "list", "watch"}}}
			if !reflect.DeepEqual(o.get("rules"), want) {
				t.Errorf("webhook Role rules %v, want read-only %v", o.get("rules"), want)
			}
		case o.kind() == "Secret":
			t.Errorf("the chart made Secret %s: the certificate's Secret is the user's", name)
		}
	}
	if !sawRole {
		t.Error("no webhook Role")
	}
	notes, err := Notes(chart, "jmx", "ops", map[string]any{"webhook": map[string]any{"certificate": map[string]any{"secretName": "my-webhook-tls", "caBundle": ca}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(notes, "your certificate, read from Secret my-webhook-tls") {
		t.Errorf("NOTES.txt does not name the user's Secret:\n%s", notes)
	}

	for vals, why := range map[string]string{
		"webhook: {certificate: {secretName: my-webhook-tls}}\n":                                                                                          "caBundle",
		"webhook: {certificate: {caBundle: \"" + strings.ReplaceAll(ca, "\n", "\\n") + "\"}}\n":                                                           "secretName",
		"webhook: {certManager: {enabled: true}, certificate: {secretName: my-webhook-tls, caBundle: \"" + strings.ReplaceAll(ca, "\n", "\\n") + "\"}}\n": "certManager",
		"webhook: {certificate: {secretName: my-webhook-tls, caBundle: " + base64.StdEncoding.EncodeToString([]byte(ca)) + "}}\n":                         "caBundle",
		"webhook: {certificate: {secretName: My_Secret, caBundle: \"" + strings.ReplaceAll(ca, "\n", "\\n") + "\"}}\n":                                    "secretName",
	} {
		if _, err := renderErr(t, vals); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("values %.80q: error %v, want one naming %s", vals, err, why)
		}
	}
}
