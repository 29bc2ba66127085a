package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/handlerkit/handlerkit/pkg/testenv"
	"github.com/handlerkit/handlerkit/pkg/testenv/freeport"
	"github.com/handlerkit/handlerkit/pkg/webhook"
)

const (
	secretName  = "webhook-certs"
	serviceName = "handlerkit-webhook"
	// testLabel=<fixture id> marks the namespaces a fixture's webhooks see,
	// so that tests sharing the control plane never call each other's.
	testLabel = "webhook-test"
	// excludeLabel keeps a namespace out of every test webhook, as the
	// operator's manifests keep system namespaces out.
	excludeLabel = "handlerkit.dev/webhook-exclude"
	// deadline bounds every wait on a condition.
	deadline = 2 * time.Minute
)

// fixture is one test's operator namespace, its least-privilege identity,
// and a namespace for pods that its webhook configuration sees.
type fixture struct {
	t          *testing.T
	env        *testenv.Environment
	admin      kubernetes.Interface
	id         string // the operator's namespace, also the configuration's name
	podNS      string
	operator   kubernetes.Interface // the operator's ServiceAccount, with PolicyRules and ClusterPolicyRules only
	configName string
}

func newFixture(t *testing.T, external bool) *fixture {
	t.Helper()
	env := cluster.Get(t)
	ctx := t.Context()
	admin := env.Clientset()
	opNS, err := env.CreateNamespace(ctx, "webhook-op")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, env: env, admin: admin, id: opNS, configName: opNS}
	f.podNS = f.namespace(false)

	// The operator's identity gets exactly what the package documents.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "webhook"}, Rules: webhook.PolicyRules(secretName, external)}
	if _, err := admin.RbacV1().Roles(opNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: opNS, Name: "operator"}}
	if _, err := admin.RbacV1().RoleBindings(opNS).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "webhook"}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "webhook"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !external {
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: opNS}, Rules: webhook.ClusterPolicyRules(f.configName)}
		if _, err := admin.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: opNS}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: opNS},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = admin.RbacV1().ClusterRoleBindings().Delete(ctx, opNS, metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoles().Delete(ctx, opNS, metav1.DeleteOptions{})
		_ = admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, f.configName, metav1.DeleteOptions{})
	})
	cfg, err := env.ConfigForServiceAccount(ctx, opNS, "operator")
	if err != nil {
		t.Fatal(err)
	}
	if f.operator, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

// namespace creates a namespace the fixture's webhooks see, or, excluded,
// one that carries excludeLabel.
func (f *fixture) namespace(excluded bool) string {
	f.t.Helper()
	labels := map[string]string{testLabel: f.id}
	if excluded {
		labels[excludeLabel] = "true"
	}
	ns, err := f.admin.CoreV1().Namespaces().Create(f.t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "webhook-pods-", Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return ns.Name
}

// certOptions are the options every replica of the fixture's operator uses.
func (f *fixture) certOptions() webhook.CertOptions {
	return webhook.CertOptions{
		Namespace:         f.id,
		SecretName:        secretName,
		ServiceName:       serviceName,
		ExtraIPs:          []net.IP{net.IPv4(127, 0, 0, 1)},
		WebhookConfigName: f.configName,
		PropagationDelay:  time.Second,
	}
}

// hook is one webhook of the fixture's configuration.
type hook struct {
	name, url, resource string
	objectSelector      *metav1.LabelSelector
}

// installConfig creates the fixture's MutatingWebhookConfiguration, as the
// operator's manifests would: no caBundle, failurePolicy Ignore, 5 s.
func (f *fixture) installConfig(caBundle []byte, hooks ...hook) {
	f.t.Helper()
	ignore := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	never := admissionregistrationv1.NeverReinvocationPolicy
	timeout := int32(5)
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: f.configName}}
	for _, h := range hooks {
		url := h.url
		cfg.Webhooks = append(cfg.Webhooks, admissionregistrationv1.MutatingWebhook{
			Name:                    h.name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			FailurePolicy:           &ignore,
			TimeoutSeconds:          &timeout,
			ReinvocationPolicy:      &never,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{h.resource}},
			}},
			NamespaceSelector: &metav1.LabelSelector{
				MatchLabels:      map[string]string{testLabel: f.id},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: excludeLabel, Operator: metav1.LabelSelectorOpDoesNotExist}},
			},
			ObjectSelector: h.objectSelector,
		})
	}
	if _, err := f.admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(f.t.Context(), cfg, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// replica is one replica of the operator: a CertManager and, with
// handlers, a Server.
type replica struct {
	name string
	m    *webhook.CertManager
	reg  *prometheus.Registry
	addr string // "" without a server

	stopServerOnce sync.Once
	stopServer     func()
}

// startReplica starts a replica that stops with the test.
func (f *fixture) startReplica(name string, opts webhook.CertOptions, handlers map[string]webhook.Handler) *replica {
	f.t.Helper()
	r := &replica{name: name, reg: prometheus.NewRegistry(), stopServer: func() {}}
	log := testLogger(f.t, name)
	opts.Registerer, opts.Logger = r.reg, log
	var err error
	if r.m, err = webhook.NewCertManager(f.operator, opts); err != nil {
		f.t.Fatal(err)
	}
	var srv *webhook.Server
	if handlers != nil {
		port, err := freeport.Loopback()
		if err != nil {
			f.t.Fatal(err)
		}
		f.t.Cleanup(func() { freeport.Release(port) })
		// Every admission call a handshake: a certificate the apiserver
		// does not trust fails the call it was presented for.
		srv, err = webhook.NewServer(webhook.WithoutKeepAlives(webhook.ServerOptions{
			Addr:           net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			GetCertificate: r.m.GetCertificate, Handlers: handlers, Registerer: r.reg, Logger: log,
			// The apiserver's dialled-ahead connection would hold a stop
			// for the default 5 s; no request is in flight by then.
			ShutdownTimeout: time.Second,
		}))
		if err != nil {
			f.t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			f.t.Fatal(err)
		}
		r.addr = srv.Addr()
	}
	mctx, mcancel := context.WithCancel(context.Background())
	mdone := make(chan error, 1)
	go func() { mdone <- r.m.Run(mctx) }()
	if srv != nil {
		sctx, scancel := context.WithCancel(context.Background())
		sdone := make(chan error, 1)
		go func() { sdone <- srv.Serve(sctx) }()
		r.stopServer = func() {
			r.stopServerOnce.Do(func() {
				scancel()
				if err := <-sdone; err != nil {
					f.t.Errorf("replica %s: Serve: %v", name, err)
				}
			})
		}
	}
	f.t.Cleanup(func() {
		r.stopServer()
		mcancel()
		if err := <-mdone; err != nil {
			f.t.Errorf("replica %s: Run: %v", name, err)
		}
	})
	return r
}

// url is the replica's webhook URL for path.
func (r *replica) url(path string) string { return "https://" + r.addr + path }

// served returns the certificate the replica's server presents now.
func (r *replica) served(ctx context.Context) (*x509.Certificate, error) {
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} // only reads the certificate
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", r.addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.(*tls.Conn).ConnectionState().PeerCertificates[0], nil
}

// testLogger logs through t, prefixed with the replica's name, until the
// test's cleanups end (a TLS handshake may still fail after a server
// stopped, and t.Log after the test panics).
func testLogger(t *testing.T, name string) logrus.FieldLogger {
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	l := logrus.New()
	l.SetOutput(w)
	l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: "15:04:05.000"})
	return l.WithField("replica", name)
}

type testWriter struct {
	mu     sync.Mutex
	t      *testing.T
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
}

// labeler is the tests' webhook: it sets the label key=yes.
func labeler(key string) webhook.Handler {
	return webhook.HandlerFunc(func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		var meta metav1.PartialObjectMetadata
		if err := json.Unmarshal(req.Object.Raw, &meta); err != nil {
			return &admissionv1.AdmissionResponse{Allowed: true, Warnings: []string{"test labeler: " + err.Error()}}
		}
		op := map[string]any{"op": "add", "path": "/metadata/labels/" + key, "value": "yes"}
		if meta.Labels == nil {
			op = map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]string{key: "yes"}}
		}
		patch, _ := json.Marshal([]any{op})
		return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch}
	})
}

// createPod creates a pod in ns through client and returns it as stored.
func createPod(ctx context.Context, client kubernetes.Interface, ns string) (*corev1.Pod, error) {
	return client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "p-"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:v1"}}},
	}, metav1.CreateOptions{})
}

// hasLabels reports whether pod carries every key=yes.
func hasLabels(pod *corev1.Pod, keys ...string) bool {
	for _, k := range keys {
		if pod.Labels[k] != "yes" {
			return false
		}
	}
	return true
}

// waitFor polls cond until it holds, failing t after deadline.
func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	start := time.Now()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, deadline, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if err != nil {
			last = err
			return false, nil
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting %s for %s: %v (last error: %v)", deadline, what, err, last)
	}
	t.Logf("%s after %s", what, time.Since(start).Round(time.Millisecond))
}

// mutatedPod creates pods in the fixture's namespace until one comes back
// with every label: the apiserver then trusts the webhook's CA.
func (f *fixture) mutatedPod(keys ...string) *corev1.Pod {
	f.t.Helper()
	var pod *corev1.Pod
	waitFor(f.t, fmt.Sprintf("a pod labelled %v by the webhook", keys), func(ctx context.Context) (bool, error) {
		p, err := createPod(ctx, f.admin, f.podNS)
		if err != nil {
			return false, err
		}
		pod = p
		return hasLabels(p, keys...), nil
	})
	return pod
}

// stored is the Secret's content, parsed.
type stored struct {
	secret  *corev1.Secret
	bundle  []*x509.Certificate
	signer  *x509.Certificate
	serving *x509.Certificate
}

func (f *fixture) stored(ctx context.Context) (*stored, error) {
	sec, err := f.admin.CoreV1().Secrets(f.id).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	s := &stored{secret: sec}
	if s.bundle, err = pemCertificates(sec.Data[webhook.KeyCABundle]); err != nil {
		return nil, fmt.Errorf("ca.crt: %w", err)
	}
	if signer, err := pemCertificates(sec.Data[webhook.KeySignerCert]); err == nil {
		s.signer = signer[0]
	}
	serving, err := pemCertificates(sec.Data[webhook.KeyServingCert])
	if err != nil {
		return nil, fmt.Errorf("tls.crt: %w", err)
	}
	s.serving = serving[0]
	return s, nil
}

// issuer returns the bundle's CA that signed the serving certificate.
func (s *stored) issuer() *x509.Certificate {
	for _, ca := range s.bundle {
		if s.serving.CheckSignatureFrom(ca) == nil {
			return ca
		}
	}
	return nil
}

func pemCertificates(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no certificate")
	}
	return out, nil
}

// configCarries reports whether every webhook of the fixture's configuration
// carries bundle.
func (f *fixture) configCarries(ctx context.Context, bundle []byte) (bool, error) {
	cfg, err := f.admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, f.configName, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	for _, wh := range cfg.Webhooks {
		if string(wh.ClientConfig.CABundle) != string(bundle) {
			return false, nil
		}
	}
	return len(cfg.Webhooks) > 0, nil
}

// metric returns the value of the counter name with labels in reg, 0 when
// it has no such series.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			match := true
			for k, v := range labels {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
					match = false
				}
			}
			if match {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
