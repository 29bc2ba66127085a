package e2e

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/operator"
	"github.com/handlerkit/handlerkit/pkg/testenv/freeport"
	"github.com/handlerkit/handlerkit/pkg/webhook"
)

// webhookSecretName is the Secret of the operator's webhook certificates (the
// contract of issue 27).
const webhookSecretName = "prometheus-jmx-exporter-operator-webhook-tls"

// webhookPort is the operator container's webhook port (the Service's
// target).
const webhookPort = 9443

// TestCARotationWhilePodsAreCreatedThroughTheDeployedOperator: a CA rotation
// of the deployed operator's webhook while pods are created, two at a time,
// in a namespace it serves: no creation fails, every pod gets the agent at
// start, no TLS handshake with the operator fails (its own metric), and every
// fresh handshake the test makes with it meanwhile presents a certificate that
// the configuration's caBundle of that moment trusts. A rotation in one write
// (a new CA, bundle and certificate at once) fails it: one pod without the
// agent and one failed handshake in one run, two of 23 untrusted handshakes in
// another.
//
// The operator rotates its CA eight months into the CA's year, each step
// PropagationDelay (5 minutes) after the one before. The test does not wait
// for that: it runs a CertManager of its own on the operator's Secret and
// configuration, with the operator's names (a replica as far as the protocol
// goes: replicas agree through the Secret, and none is special), starts the
// rotation with RotateCA, and lets its manager take the two later steps, each
// as soon as the cluster has caught up (StepCheck): the new CA's certificate
// is served once the apiserver trusts the new CA (a probe webhook in the
// same configuration, serving a certificate of the new CA alone, is called),
// and the old CA leaves the bundle once every operator pod serves the new
// CA's certificate. The operator's own manager re-reads the Secret and serves
// what it holds, which is what is proved here: through its Service, its
// watch, and its handshakes. pkg/webhook's
// TestRotationWhilePodsAreCreatedLosesNoAdmission proves the steps' order on
// every version of the Secret.
func TestCARotationWhilePodsAreCreatedThroughTheDeployedOperator(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	probe := newCAProbe(t)
	op := deployAtStartOperatorWith(t, "e2e-rotate", []admissionregistrationv1.MutatingWebhook{probe.webhook()})
	ns := op.ns
	probe.ns = ns
	labels := map[string]string{"app": "rotate"}
	createExporter(t, ns, exporter("rotate", labels, withMode(jmxv1alpha1.InjectionModeAtStart)))
	// The pods never run, so none could prove the change: the test is about
	// the webhook's availability, so the change is marked proven, and every
	// pod is given the agent (not only a canary).
	markProven(t, ns, "rotate", jmxv1alpha1.DefaultExporterConfig)
	waitWebhookInjects(t, ns, labels, "rotate")
	before := readWebhookSecret(t, op.ns)
	handshakesBefore := webhookHandshakeErrors(t, op.ns)

	reg := prometheus.NewRegistry()
	logger := logrus.New()
	logger.SetOutput(testLogWriter{t})
	var asked sync.Map // webhook.Step -> true
	certs, err := webhook.NewCertManager(kube, webhook.CertOptions{
		Namespace: op.ns, SecretName: webhookSecretName, ServiceName: webhookServiceName,
		WebhookConfigName: op.config, PropagationDelay: time.Second,
		StepCheck: func(ctx context.Context, step webhook.Step, c webhook.Certificates) error {
			asked.Store(step, true)
			switch step {
			case webhook.StepServeNewCA:
				return probe.trusted(ctx, op.ns)
			case webhook.StepDropOldCA:
				return operatorServes(ctx, op.ns, func(served *x509.Certificate) error {
					pool := x509.NewCertPool()
					pool.AddCert(c.Signer)
					_, err := served.Verify(x509.VerifyOptions{Roots: pool})
					return err
				})
			}
			return nil
		},
		Registerer: reg, Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	managerCtx, stopManager := context.WithCancel(ctx)
	managerDone := make(chan error, 1)
	go func() { managerDone <- certs.Run(managerCtx) }()
	defer func() {
		stopManager()
		if err := <-managerDone; err != nil {
			t.Errorf("the test's CertManager: %v", err)
		}
	}()
	waitFor(t, time.Minute, "the test's CertManager read the Secret", func() (bool, string) {
		err := certs.Ready()
		return err == nil, fmt.Sprint(err)
	})

	// Pods are created, two at a time, until the end.
	var (
		created, failed atomic.Int32
		pods            sync.Map // name -> *corev1.Pod
		firstFailure    atomic.Value
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	for range 2 {
		load.Go(func() {
			for loadCtx.Err() == nil {
				p, err := kube.CoreV1().Pods(ns).Create(loadCtx, pendingPod(labels), metav1.CreateOptions{})
				if loadCtx.Err() != nil {
					return
				}
				if err != nil {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, err.Error())
					continue
				}
				created.Add(1)
				pods.Store(p.Name, p)
			}
		})
	}
	defer func() { stopLoad(); load.Wait() }()
	atLeast := func(what string, n int32) {
		from := created.Load()
		waitFor(t, 2*time.Minute, what, func() (bool, string) {
			return created.Load() >= from+n, fmt.Sprintf("%d created, %d failed", created.Load(), failed.Load())
		})
	}
	atLeast("10 pods before the rotation", 10)
	// Meanwhile, fresh TLS handshakes with the operator, one after another:
	// each certificate it serves must chain to a CA of the caBundle the
	// configuration carried just before. The apiserver keeps its
	// connections to a webhook open, so the pods alone would rarely show a
	// moment in which a new connection would not be trusted; this does.
	var handshakes, untrusted atomic.Int32
	var firstUntrusted atomic.Value
	load.Go(func() {
		for loadCtx.Err() == nil {
			c, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(loadCtx, op.config, metav1.GetOptions{})
			if err != nil || len(c.Webhooks) == 0 {
				continue
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(c.Webhooks[0].ClientConfig.CABundle)
			// The handshake runs under the test's context, not loadCtx:
			// a handshake cut off by the end of the load would count as a
			// failed handshake in the operator's metric (the server sees
			// EOF), which is the test's doing, not the rotation's. Only a
			// certificate the bundle does not trust counts here; a
			// handshake that did not complete is tried again.
			var verifyErr error
			verified := false
			_ = operatorServes(ctx, op.ns, func(served *x509.Certificate) error {
				verified = true
				_, verifyErr = served.Verify(x509.VerifyOptions{Roots: pool})
				return verifyErr
			})
			if !verified {
				continue
			}
			handshakes.Add(1)
			if verifyErr != nil {
				untrusted.Add(1)
				firstUntrusted.CompareAndSwap(nil, verifyErr.Error())
			}
		}
	})
	start := time.Now()
	if err := certs.RotateCA(ctx); err != nil {
		t.Fatal(err)
	}
	var after webhookSecret
	waitFor(t, 3*time.Minute, "the CA rotation's end: the new CA alone, its certificate served by the operator, the configuration updated", func() (bool, string) {
		after = readWebhookSecret(t, op.ns)
		if len(after.bundle) != 1 || after.signer.Equal(before.signer) || after.serving.CheckSignatureFrom(after.signer) != nil {
			return false, fmt.Sprintf("%d CAs in the bundle", len(after.bundle))
		}
		c, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, op.config, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, w := range c.Webhooks {
			if string(w.ClientConfig.CABundle) != string(after.secret.Data[webhook.KeyCABundle]) {
				return false, "webhook " + w.Name + " has another caBundle"
			}
		}
		err = operatorServes(ctx, op.ns, func(served *x509.Certificate) error {
			if !served.Equal(after.serving) {
				return errors.New("serves another certificate")
			}
			return nil
		})
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("the CA rotation took %s", time.Since(start).Round(time.Millisecond))
	atLeast("10 pods after the rotation", 10)
	stopLoad()
	load.Wait()

	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d pod creations failed; the first: %v", n, int(n)+int(created.Load()), firstFailure.Load())
	}
	unmutated := 0
	pods.Range(func(_, v any) bool {
		p := v.(*corev1.Pod)
		if rec, ok, err := atstart.ParseRecord(p); err != nil || !ok || rec.Exporter != "rotate" {
			if unmutated++; unmutated <= 5 {
				t.Errorf("pod %s created at %s was not given the agent: %v", p.Name, p.CreationTimestamp, p.Annotations)
			}
		}
		return true
	})
	t.Logf("%d pods created during the rotation, %d without the agent", created.Load(), unmutated)
	// A moment in which the apiserver did not trust what the operator
	// served shows as a failed handshake (failurePolicy Ignore would only
	// leave the pod without the agent).
	if n := webhookHandshakeErrors(t, op.ns) - handshakesBefore; n > 0 {
		t.Errorf("%v TLS handshakes with the operator failed during the rotation", n)
	}
	if n := untrusted.Load(); n > 0 || handshakes.Load() == 0 {
		t.Errorf("%d of the test's %d handshakes with the operator met a certificate the configuration's caBundle did not trust; the first: %v",
			n, handshakes.Load(), firstUntrusted.Load())
	}
	t.Logf("%d handshakes with the operator during the rotation", handshakes.Load())
	for _, step := range []webhook.Step{webhook.StepServeNewCA, webhook.StepDropOldCA} {
		if _, ok := asked.Load(step); !ok {
			t.Errorf("StepCheck never asked about %s", step)
		}
	}
	// The test's manager took the three steps and changed nothing else (a
	// manager with other names than the operator's would have reissued the
	// serving certificate first; a "stamp" of missing rotation times would
	// be harmless).
	writes := gatheredCounters(t, reg, "handlerkit_webhook_certificate_writes_total", "step")
	for _, step := range []string{"created", "new-ca", "serve-new-ca", "renew-serving", "drop-old-ca"} {
		want := map[string]float64{"new-ca": 1, "serve-new-ca": 1, "drop-old-ca": 1}[step]
		if n := writes[step]; n != want {
			t.Errorf("the test's CertManager wrote step %s %v times, want %v (all: %v)", step, n, want, writes)
		}
	}
}

// pendingPod is a pod the scheduler never places (its nodeSelector matches no
// node): its creation goes through admission, and then it costs nothing.
func pendingPod(labels map[string]string) *corev1.Pod {
	p := jvmPod("", labels, "localhost/handlerkit/never-run:v1")
	p.GenerateName = "rotate-"
	p.Spec.NodeSelector = map[string]string{"e2e.handlerkit.dev/no-such-node": "true"}
	return p
}

// webhookSecret is the webhook's Secret, parsed.
type webhookSecret struct {
	secret  *corev1.Secret
	bundle  []*x509.Certificate
	signer  *x509.Certificate
	serving *x509.Certificate
}

func readWebhookSecret(t *testing.T, ns string) webhookSecret {
	t.Helper()
	sec, err := kube.CoreV1().Secrets(ns).Get(t.Context(), webhookSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := webhookSecret{secret: sec}
	parse := func(key string) []*x509.Certificate {
		var out []*x509.Certificate
		rest := sec.Data[key]
		for {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				return out
			}
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatalf("%s in the Secret: %v", key, err)
			}
			out = append(out, c)
		}
	}
	s.bundle = parse(webhook.KeyCABundle)
	if signers, serving := parse(webhook.KeySignerCert), parse(webhook.KeyServingCert); len(signers) == 1 && len(serving) > 0 {
		s.signer, s.serving = signers[0], serving[0]
	} else {
		t.Fatalf("the Secret holds %d signing CAs and %d serving certificates", len(signers), len(serving))
	}
	return s
}

// operatorServes checks, with a TLS handshake with each running operator
// pod's webhook port, the certificate it serves.
func operatorServes(ctx context.Context, ns string, check func(*x509.Certificate) error) error {
	list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + operatorName})
	if err != nil {
		return err
	}
	n := 0
	for _, p := range list.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		n++
		// A generous timeout: a handshake the client gives up on is a
		// handshake error in the operator's metric, which the rotation
		// test counts.
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: time.Minute}, Config: &tls.Config{InsecureSkipVerify: true}} // #nosec G402 -- the test reads the certificate, it trusts nothing
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.Status.PodIP, strconv.Itoa(webhookPort)))
		if err != nil {
			return fmt.Errorf("operator pod %s: %w", p.Name, err)
		}
		served := conn.(*tls.Conn).ConnectionState().PeerCertificates[0]
		conn.Close()
		if err := check(served); err != nil {
			return fmt.Errorf("operator pod %s: %w", p.Name, err)
		}
	}
	if n == 0 {
		return errors.New("no operator pod runs")
	}
	return nil
}

// webhookHandshakeErrors sums handlerkit_webhook_tls_handshake_errors_total
// over the operator's pods (their metrics port).
func webhookHandshakeErrors(t *testing.T, ns string) float64 {
	t.Helper()
	list, err := kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + operatorName})
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, p := range list.Items {
		if p.Status.PodIP == "" {
			continue
		}
		body, err := scrape(p.Status.PodIP, 8383)
		if err != nil {
			t.Fatalf("operator pod %s's metrics: %v", p.Name, err)
		}
		v, ok := metricValue(body, "handlerkit_webhook_tls_handshake_errors_total")
		if !ok {
			t.Fatalf("operator pod %s serves no handlerkit_webhook_tls_handshake_errors_total", p.Name)
		}
		sum += v
	}
	return sum
}

// gatheredCounters returns the values of a counter vector in reg by label.
func gatheredCounters(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// caProbe is a webhook for ConfigMaps labelled with its key that serves a
// certificate of the Secret's current signing CA only, so that the apiserver
// calls it (and a dry-run ConfigMap comes back annotated) only once it trusts
// that CA. It is in the operator's configuration, whose caBundle the
// operator (and the test's manager) keep: the apiserver trusts the probe
// exactly when it trusts the operator's new certificate.
type caProbe struct {
	t    *testing.T
	addr string
	ns   string
	mu   sync.Mutex
	cert atomic.Pointer[tls.Certificate]
}

const caProbeLabel = "e2e.handlerkit.dev/ca-probe"

func newCAProbe(t *testing.T) *caProbe {
	p := &caProbe{t: t}
	port, err := freeport.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { freeport.Release(port) })
	p.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	srv, err := webhook.NewServer(webhook.ServerOptions{
		Addr: p.addr,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := p.cert.Load(); c != nil {
				return c, nil
			}
			return nil, errors.New("probe: no certificate yet")
		},
		Handlers: map[string]webhook.Handler{"/probe": webhook.HandlerFunc(func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			return &admissionv1.AdmissionResponse{Allowed: true,
				Patch: []byte(`[{"op":"add","path":"/metadata/annotations","value":{"probed":"yes"}}]`)}
		})},
		Registerer: prometheus.NewRegistry(), Logger: logrus.New(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("probe: Serve: %v", err)
		}
	})
	return p
}

// webhook is the probe's entry in the operator's configuration.
func (p *caProbe) webhook() admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{
		Name:                    "ca-probe.e2e.handlerkit.dev",
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + p.addr + "/probe")},
		Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
		FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:          ptr.To(int32(5)),
		AdmissionReviewVersions: []string{"v1"},
		ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{caProbeLabel: "yes"}},
	}
}

// trusted returns nil when the apiserver calls the probe with a certificate
// of the Secret's signing CA.
func (p *caProbe) trusted(ctx context.Context, secretNS string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	sec, err := kube.CoreV1().Secrets(secretNS).Get(ctx, webhookSecretName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	pair, err := servingFor(sec.Data[webhook.KeySignerCert], sec.Data[webhook.KeySignerKey])
	if err != nil {
		return err
	}
	p.cert.Store(pair)
	cm, err := kube.CoreV1().ConfigMaps(p.ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Labels: map[string]string{caProbeLabel: "yes"}},
	}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return err
	}
	if cm.Annotations["probed"] != "yes" {
		return errors.New("the apiserver does not trust the new CA yet")
	}
	return nil
}

// servingFor returns a serving certificate for 127.0.0.1 signed by the CA
// whose certificate and key (PEM) are given.
func servingFor(caCertPEM, caKeyPEM []byte) (*tls.Certificate, error) {
	ca, err := tls.X509KeyPair(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "ca-probe"},
		NotBefore: now.Add(-5 * time.Minute), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}, caCert, &key.PublicKey, ca.PrivateKey.(crypto.Signer))
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// testLogWriter writes a logger's lines to the test's log.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", p)
	return len(p), nil
}

// markProven writes, as the operator would once a JVM had run them for the
// breaker window, that the exporter's generation and config are proven
// (status.proven), so that the webhook gives the agent to every pod at once.
func markProven(t *testing.T, ns, name, config string) {
	t.Helper()
	waitFor(t, time.Minute, "status.proven written", func() (bool, string) {
		ex := getExporter(t, ns, name)
		// Only once the operator serves the exporter (its finalizer): an
		// operator that does not serve the namespace replaces the status of
		// an exporter that no operator has taken (NotServed).
		if !slices.Contains(ex.Finalizers, operator.Finalizer) {
			return false, "no finalizer yet"
		}
		ex.Status.Proven = &jmxv1alpha1.ProvenChange{Generation: ex.Generation, ConfigSHA256: sha256Hex(config), ProvenAt: metav1.Now()}
		_, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).UpdateStatus(t.Context(), ex, metav1.UpdateOptions{})
		return err == nil, fmt.Sprint(err)
	})
}
