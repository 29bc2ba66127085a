package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/handlerkit/handlerkit/pkg/testenv/freeport"
	"github.com/handlerkit/handlerkit/pkg/webhook"
)

const requests = "handlerkit_webhook_requests_total"
const writes = "handlerkit_webhook_certificate_writes_total"

func TestPodsAreMutatedThroughTheManagedCA(t *testing.T) {
	f := newFixture(t, false)
	opts := f.certOptions()
	// Longer than any wait below: what the manager does here, it does on a
	// watch event.
	opts.ResyncInterval = 10 * time.Minute
	r := f.startReplica("a", opts, map[string]webhook.Handler{"/mutate": labeler("mutated")})
	// The configuration arrives after the manager started, as with a
	// Deployment applied beside its webhook configuration.
	f.installConfig(nil, hook{name: "pods.a.webhook.test", url: r.url("/mutate"), resource: "pods"})
	var s *stored
	waitFor(t, "the configuration carries the Secret's bundle", func(ctx context.Context) (bool, error) {
		var err error
		if s, err = f.stored(ctx); err != nil {
			return false, err
		}
		return f.configCarries(ctx, s.secret.Data[webhook.KeyCABundle])
	})
	if s.secret.Type != corev1.SecretTypeTLS || len(s.bundle) != 1 || s.signer == nil || !s.bundle[0].Equal(s.signer) || s.issuer() == nil {
		t.Fatalf("Secret of type %s with %d CAs; want kubernetes.io/tls with one CA that signed tls.crt", s.secret.Type, len(s.bundle))
	}
	for _, name := range []string{serviceName + "." + f.id + ".svc", serviceName + "." + f.id + ".svc.cluster.local", "127.0.0.1"} {
		if err := s.serving.VerifyHostname(name); err != nil {
			t.Errorf("serving certificate: %v", err)
		}
	}

	// The documented rules were enough, and they grant no more than they say.
	if _, err := f.operator.CoreV1().Secrets(f.id).Get(t.Context(), "another", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator's identity may read another Secret (%v)", err)
	}
	if _, err := f.operator.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), "another", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator's identity may read another webhook configuration (%v)", err)
	}

	f.mutatedPod("mutated")
	for range 5 {
		p, err := createPod(t.Context(), f.admin, f.podNS)
		if err != nil {
			t.Fatal(err)
		}
		if !hasLabels(p, "mutated") {
			t.Fatalf("pod %s not mutated once the apiserver trusted the CA: labels %v", p.Name, p.Labels)
		}
	}
	p, err := createPod(t.Context(), f.admin, f.namespace(true))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Labels) != 0 {
		t.Errorf("a pod of an excluded namespace was mutated: %v", p.Labels)
	}
	if got := metric(t, r.reg, requests, map[string]string{"path": "/mutate", "result": "patched"}); got < 6 {
		t.Errorf("%s{result=patched} = %v, want at least 6", requests, got)
	}
	if err := r.m.Err(); err != nil {
		t.Errorf("Err: %v", err)
	}

	// An apply of the manifests that empties the caBundle is undone.
	if _, err := f.admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(t.Context(), f.configName,
		types.JSONPatchType, []byte(`[{"op":"remove","path":"/webhooks/0/clientConfig/caBundle"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the emptied caBundle set again", func(ctx context.Context) (bool, error) {
		return f.configCarries(ctx, s.secret.Data[webhook.KeyCABundle])
	})
}

func TestManagersStartedTogetherConvergeOnOneSecret(t *testing.T) {
	f := newFixture(t, false)
	// No pod is created here; the webhook's URL is never called.
	f.installConfig(nil, hook{name: "pods.webhook.test", url: "https://127.0.0.1:1/mutate", resource: "pods"})
	const n = 3
	replicas := make([]*replica, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { replicas[i] = f.startReplica(fmt.Sprintf("r%d", i), f.certOptions(), nil) })
	}
	wg.Wait()
	converged := func(what string, extra func(s *stored) bool) *stored {
		var s *stored
		waitFor(t, what, func(ctx context.Context) (bool, error) {
			var err error
			if s, err = f.stored(ctx); err != nil {
				return false, err
			}
			for _, r := range replicas {
				c, ok := r.m.Certificates()
				if !ok || c.ResourceVersion != s.secret.ResourceVersion {
					return false, nil
				}
				cert, err := r.m.GetCertificate(nil)
				if err != nil || !cert.Leaf.Equal(s.serving) {
					return false, err
				}
			}
			if !extra(s) {
				return false, nil
			}
			return f.configCarries(ctx, s.secret.Data[webhook.KeyCABundle])
		})
		return s
	}
	first := converged("every replica serving the Secret", func(*stored) bool { return true })
	if len(first.bundle) != 1 {
		t.Fatalf("a new Secret with %d CAs", len(first.bundle))
	}
	count := func(step string) (sum float64) {
		for _, r := range replicas {
			sum += metric(t, r.reg, writes, map[string]string{"step": step})
		}
		return sum
	}
	if c := count("created"); c != 1 {
		t.Fatalf("the Secret was created %v times", c)
	}

	// Every replica sees the steps of a rotation fall due; each is taken once.
	if err := replicas[0].m.RotateCA(t.Context()); err != nil {
		t.Fatal(err)
	}
	last := converged("every replica serving the new CA's certificate, with the old CA gone", func(s *stored) bool {
		return len(s.bundle) == 1 && !s.signer.Equal(first.signer) && s.issuer().Equal(s.signer)
	})
	for _, step := range []string{"created", "new-ca", "serve-new-ca", "drop-old-ca"} {
		if c := count(step); c != 1 {
			t.Errorf("step %s taken %v times, want once", step, c)
		}
	}
	if c := count("renew-serving") + count("stamp"); c != 0 {
		t.Errorf("%v other steps taken", c)
	}
	if !last.bundle[0].Equal(last.signer) {
		t.Error("the bundle is not the signing CA")
	}
}

// TestRotationWhilePodsAreCreatedLosesNoAdmission rotates the serving
// certificate and then the CA while pods are created one after another.
// Two replicas serve (the configuration calls both, each adds its label),
// so a replica that served an untrusted certificate at any moment would
// leave a pod without its label (failurePolicy Ignore admits it).
//
// The rotation's waits are made conditions here: StepCheck lets the step
// ServeNewCA through once a probe webhook of the same configuration,
// serving a certificate of the new CA alone, is called by the apiserver
// (so the apiserver trusts the new bundle), and DropOldCA once both
// replicas present the new CA's certificate.
func TestRotationWhilePodsAreCreatedLosesNoAdmission(t *testing.T) {
	f := newFixture(t, false)
	probe := newProbe(t, f)
	opts := f.certOptions()
	var gates sync.Map                      // Step -> number of calls
	var replicas atomic.Pointer[[]*replica] // set once both started; read by StepCheck
	opts.StepCheck = func(ctx context.Context, step webhook.Step, c webhook.Certificates) error {
		n, _ := gates.LoadOrStore(step, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		switch step {
		case webhook.StepServeNewCA:
			return probe.trusted(ctx)
		case webhook.StepDropOldCA:
			pool := x509.NewCertPool()
			pool.AddCert(c.Signer)
			rs := replicas.Load()
			if rs == nil {
				return errors.New("the replicas are starting")
			}
			for _, r := range *rs {
				served, err := r.served(ctx)
				if err != nil {
					return err
				}
				if _, err := served.Verify(x509.VerifyOptions{Roots: pool}); err != nil {
					return fmt.Errorf("replica %s still serves a certificate of the old CA", r.name)
				}
			}
		}
		return nil
	}
	a := f.startReplica("a", opts, map[string]webhook.Handler{"/mutate": labeler("by-a")})
	b := f.startReplica("b", opts, map[string]webhook.Handler{"/mutate": labeler("by-b")})
	replicas.Store(&[]*replica{a, b})
	f.installConfig(nil,
		hook{name: "pods.a.webhook.test", url: a.url("/mutate"), resource: "pods"},
		hook{name: "pods.b.webhook.test", url: b.url("/mutate"), resource: "pods"},
		hook{name: "probe.webhook.test", url: probe.url, resource: "configmaps",
			objectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"probe": "yes"}}})
	f.mutatedPod("by-a", "by-b")
	before, err := f.stored(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	// Every version of the Secret, to check the order of the steps.
	history := watchSecret(t, f, before.secret.ResourceVersion)

	// Pods are created, four at a time, until the end.
	var (
		created, failed atomic.Int32
		pods            sync.Map // name -> *corev1.Pod
		firstFailure    atomic.Value
	)
	ctx, stop := context.WithCancel(t.Context())
	var load sync.WaitGroup
	// Several at once, so that a moment without trust is hard to miss.
	for range 4 {
		load.Go(creator(ctx, f, &created, &failed, &pods, &firstFailure))
	}
	defer func() { stop(); load.Wait() }()
	handshakes := func() float64 {
		return metric(t, a.reg, "handlerkit_webhook_tls_handshake_errors_total", nil) + metric(t, b.reg, "handlerkit_webhook_tls_handshake_errors_total", nil)
	}
	atLeast := func(what string, n int32) {
		from := created.Load()
		waitFor(t, what, func(context.Context) (bool, error) { return created.Load() >= from+n, nil })
	}
	atLeast("10 pods before the rotations", 10)
	handshakesBefore := handshakes()

	if err := a.m.RotateServing(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both replicas serving the renewed certificate", func(ctx context.Context) (bool, error) {
		s, err := f.stored(ctx)
		if err != nil || s.serving.Equal(before.serving) {
			return false, err
		}
		return servesAll(ctx, s.serving, a, b)
	})
	atLeast("10 pods after the serving certificate's renewal", 10)

	rotationStart := time.Now()
	if err := b.m.RotateCA(t.Context()); err != nil {
		t.Fatal(err)
	}
	var after *stored
	waitFor(t, "the CA rotation's end: one new CA, its certificate served by both, the configuration updated", func(ctx context.Context) (bool, error) {
		var err error
		if after, err = f.stored(ctx); err != nil {
			return false, err
		}
		if len(after.bundle) != 1 || after.signer.Equal(before.signer) || !after.issuer().Equal(after.signer) {
			return false, nil
		}
		if ok, err := f.configCarries(ctx, after.secret.Data[webhook.KeyCABundle]); !ok || err != nil {
			return false, err
		}
		return servesAll(ctx, after.serving, a, b)
	})
	t.Logf("the CA rotation took %s", time.Since(rotationStart).Round(time.Millisecond))
	atLeast("10 pods after the CA rotation", 10)
	stop()
	load.Wait()

	// A caller that did not trust a certificate at any moment shows as a
	// failed handshake (failurePolicy Ignore would hide it in the pod).
	if n := handshakes() - handshakesBefore; n > 0 {
		t.Errorf("%v TLS handshakes failed during the rotations", n)
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d pod creations failed; the first: %v", n, int(n)+int(created.Load()), firstFailure.Load())
	}
	unmutated := 0
	pods.Range(func(_, v any) bool {
		if p := v.(*corev1.Pod); !hasLabels(p, "by-a", "by-b") {
			if unmutated++; unmutated <= 5 {
				t.Errorf("pod %s created at %s not mutated by both replicas: labels %v", p.Name, p.CreationTimestamp, p.Labels)
			}
		}
		return true
	})
	t.Logf("%d pods created during the rotations, %d not mutated by both replicas", created.Load(), unmutated)
	for _, step := range []webhook.Step{webhook.StepServeNewCA, webhook.StepDropOldCA} {
		if n, ok := gates.Load(step); !ok || n.(*atomic.Int32).Load() == 0 {
			t.Errorf("StepCheck never asked about %s", step)
		}
	}
	checkStepOrder(t, history(), before)
}

// creator creates pods one after another in f's namespace until ctx ends.
func creator(ctx context.Context, f *fixture, created, failed *atomic.Int32, pods *sync.Map, firstFailure *atomic.Value) func() {
	return func() {
		for ctx.Err() == nil {
			p, err := createPod(ctx, f.admin, f.podNS)
			if ctx.Err() != nil {
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
	}
}

// servesAll reports whether every replica presents cert.
func servesAll(ctx context.Context, cert *x509.Certificate, rs ...*replica) (bool, error) {
	for _, r := range rs {
		served, err := r.served(ctx)
		if err != nil || !served.Equal(cert) {
			return false, err
		}
	}
	return true, nil
}

// watchSecret records every version of the fixture's Secret after rv and
// returns a function that stops watching and returns them.
func watchSecret(t *testing.T, f *fixture, rv string) func() []*stored {
	ctx, cancel := context.WithCancel(t.Context())
	w, err := f.admin.CoreV1().Secrets(f.id).Watch(ctx, metav1.ListOptions{
		ResourceVersion: rv, FieldSelector: fields.OneTermEqualSelector("metadata.name", secretName).String()})
	if err != nil {
		t.Fatal(err)
	}
	var versions []*stored
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			sec, ok := ev.Object.(*corev1.Secret)
			if !ok {
				continue
			}
			s := &stored{secret: sec}
			s.bundle, _ = pemCertificates(sec.Data[webhook.KeyCABundle])
			if serving, err := pemCertificates(sec.Data[webhook.KeyServingCert]); err == nil {
				s.serving = serving[0]
			}
			versions = append(versions, s)
		}
	}()
	return func() []*stored {
		cancel()
		w.Stop()
		<-done
		return versions
	}
}

// checkStepOrder checks the invariants of the rotation on every version of
// the Secret: the serving certificate's CA is trusted in that version and
// was trusted in the version before (the CA reached the bundle before its
// certificate was served), and a CA leaves the bundle only when no serving
// certificate of it is left.
func checkStepOrder(t *testing.T, versions []*stored, first *stored) {
	t.Helper()
	prev := first
	sizes := []int{len(first.bundle)}
	for _, s := range versions {
		sizes = append(sizes, len(s.bundle))
		issuer := s.issuer()
		if issuer == nil {
			t.Errorf("version %s: the serving certificate's CA is not in the bundle", s.secret.ResourceVersion)
		} else if !slices.ContainsFunc(prev.bundle, issuer.Equal) {
			t.Errorf("version %s serves a certificate of a CA the version before did not trust", s.secret.ResourceVersion)
		}
		prev = s
	}
	// one CA; two (old and new); one again.
	if !slices.Contains(sizes, 2) || sizes[len(sizes)-1] != 1 {
		t.Errorf("bundle sizes over the versions %v, want an overlap of two and one at the end", sizes)
	}
	t.Logf("%d versions of the Secret; CAs in the bundle: %v", len(versions), sizes)
}

// probe is a webhook for ConfigMaps labelled probe=yes that serves a
// certificate of the Secret's current signing CA only, so that the
// apiserver calls it (and a dry-run ConfigMap comes back annotated) only
// when it trusts that CA.
type probe struct {
	f    *fixture
	url  string
	mu   sync.Mutex
	cert atomic.Pointer[tls.Certificate]
	// firstAsked records when the probe was first asked about each CA.
	firstAsked map[string]time.Time
}

func newProbe(t *testing.T, f *fixture) *probe {
	p := &probe{f: f, firstAsked: map[string]time.Time{}}
	handler := webhook.HandlerFunc(func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		patch := []byte(`[{"op":"add","path":"/metadata/annotations","value":{"probed":"yes"}}]`)
		return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch}
	})
	port, err := freeport.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { freeport.Release(port) })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	srv, err := webhook.NewServer(webhook.WithoutKeepAlives(webhook.ServerOptions{
		Addr: addr,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := p.cert.Load(); c != nil {
				return c, nil
			}
			return nil, errors.New("probe: no certificate yet")
		},
		Handlers:   map[string]webhook.Handler{"/probe": handler},
		Registerer: prometheus.NewRegistry(), Logger: testLogger(t, "probe"),
	}))
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
	p.url = "https://" + addr + "/probe"
	return p
}

// trusted returns nil when the apiserver calls the probe with a certificate
// of the Secret's signing CA.
func (p *probe) trusted(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	sec, err := p.f.admin.CoreV1().Secrets(p.f.id).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := webhook.NewServingForTest(sec.Data[webhook.KeySignerCert], sec.Data[webhook.KeySignerKey], time.Hour, nil, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	p.cert.Store(&pair)
	signer := string(sec.Data[webhook.KeySignerCert])
	if _, ok := p.firstAsked[signer]; !ok {
		p.firstAsked[signer] = time.Now()
	}
	cm, err := p.f.admin.CoreV1().ConfigMaps(p.f.podNS).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Labels: map[string]string{"probe": "yes"}},
	}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return err
	}
	if cm.Annotations["probed"] != "yes" {
		return errors.New("the apiserver does not trust the new CA yet")
	}
	p.f.t.Logf("probe: the apiserver trusted the new CA %s after it was first asked", time.Since(p.firstAsked[signer]).Round(time.Millisecond))
	return nil
}

func TestAStoppedServerLeavesPodsCreatedUnmutated(t *testing.T) {
	f := newFixture(t, false)
	r := f.startReplica("a", f.certOptions(), map[string]webhook.Handler{"/mutate": labeler("mutated")})
	f.installConfig(nil, hook{name: "pods.a.webhook.test", url: r.url("/mutate"), resource: "pods"})
	f.mutatedPod("mutated")
	r.stopServer()
	for range 3 {
		start := time.Now()
		p, err := createPod(t.Context(), f.admin, f.podNS)
		if err != nil {
			t.Fatalf("with the webhook down: %v", err)
		}
		if len(p.Labels) != 0 {
			t.Errorf("pod %s mutated by a stopped server: %v", p.Name, p.Labels)
		}
		t.Logf("pod created in %s with the webhook down", time.Since(start).Round(time.Millisecond))
	}
}

// warnings collects the warnings the apiserver returns.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.seen
	w.seen = nil
	return s
}

func TestAPanickingHandlerAdmitsThePodWithAWarning(t *testing.T) {
	f := newFixture(t, false)
	r := f.startReplica("a", f.certOptions(), map[string]webhook.Handler{
		"/mutate": webhook.HandlerFunc(func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			panic("the test handler panics")
		}),
	})
	f.installConfig(nil, hook{name: "pods.a.webhook.test", url: r.url("/mutate"), resource: "pods"})
	cfg := f.env.Config()
	w := &warnings{}
	cfg.WarningHandler = w
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	waitFor(t, "a pod admitted with the server's warning", func(ctx context.Context) (bool, error) {
		p, err := createPod(ctx, client, f.podNS)
		if err != nil {
			return false, err
		}
		pod = p
		return slices.ContainsFunc(w.take(), func(s string) bool { return strings.Contains(s, "the handler failed") }), nil
	})
	if len(pod.Labels) != 0 {
		t.Errorf("pod labels %v", pod.Labels)
	}
	if got := metric(t, r.reg, requests, map[string]string{"path": "/mutate", "result": "panic"}); got < 1 {
		t.Errorf("%s{result=panic} = %v", requests, got)
	}
}

func TestAMissingConfigurationIsReportedAndRetried(t *testing.T) {
	f := newFixture(t, false)
	r := f.startReplica("a", f.certOptions(), map[string]webhook.Handler{"/mutate": labeler("mutated")})
	const syncErrors = "handlerkit_webhook_certificate_sync_errors_total"
	waitFor(t, "Err naming the missing configuration, retried", func(context.Context) (bool, error) {
		err := r.m.Err()
		return err != nil && strings.Contains(err.Error(), f.configName) && strings.Contains(err.Error(), "not found") &&
			metric(t, r.reg, syncErrors, nil) >= 2, nil
	})
	t.Logf("Err: %v", r.m.Err())
	if err := r.m.Ready(); err != nil {
		t.Errorf("Ready without a configuration: %v (the certificate is served all the same)", err)
	}
	f.installConfig(nil, hook{name: "pods.a.webhook.test", url: r.url("/mutate"), resource: "pods"})
	waitFor(t, "the caBundle set and Err cleared", func(ctx context.Context) (bool, error) {
		c, ok := r.m.Certificates()
		if !ok || r.m.Err() != nil {
			return false, nil
		}
		return f.configCarries(ctx, c.CABundle)
	})
	f.mutatedPod("mutated")
}

func TestExternalCertsAreOnlyReadAndServed(t *testing.T) {
	f := newFixture(t, true)
	// Another issuer's Secret and caBundle, as cert-manager and its
	// cainjector write them.
	caPEM, caKey, err := webhook.NewCAForTest(24 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func() map[string][]byte {
		crt, key, err := webhook.NewServingForTest(caPEM, caKey, time.Hour, nil, []net.IP{net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{webhook.KeyServingCert: crt, webhook.KeyServingKey: key, webhook.KeyCABundle: caPEM}
	}
	sec, err := f.admin.CoreV1().Secrets(f.id).Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName}, Type: corev1.SecretTypeTLS, Data: issue(),
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	opts := f.certOptions()
	opts.ExternalCerts = true
	r := f.startReplica("a", opts, map[string]webhook.Handler{"/mutate": labeler("mutated")})
	f.installConfig(caPEM, hook{name: "pods.a.webhook.test", url: r.url("/mutate"), resource: "pods"})
	f.mutatedPod("mutated")

	// A renewal by the issuer is served without a restart.
	sec.Data = issue()
	if sec, err = f.admin.CoreV1().Secrets(f.id).Update(t.Context(), sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want, _ := pemCertificates(sec.Data[webhook.KeyServingCert])
	waitFor(t, "the renewed certificate served", func(ctx context.Context) (bool, error) {
		return servesAll(ctx, want[0], r)
	})
	if err := r.m.RotateCA(t.Context()); err == nil {
		t.Error("RotateCA with ExternalCerts succeeded")
	}
	got, err := f.admin.CoreV1().Secrets(f.id).Get(t.Context(), secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != sec.ResourceVersion {
		t.Errorf("the Secret changed (resourceVersion %s, the test wrote %s)", got.ResourceVersion, sec.ResourceVersion)
	}
	for _, mf := range got.ManagedFields {
		if mf.Manager == webhook.FieldManager {
			t.Errorf("the manager wrote the external Secret: %+v", mf)
		}
	}
	if _, err := f.operator.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), f.configName, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("with ExternalCerts the operator's identity reads the configuration (%v); PolicyRules should not grant it", err)
	}
}

func TestASecretThatCannotBeReadIsReplaced(t *testing.T) {
	f := newFixture(t, false)
	r := f.startReplica("a", f.certOptions(), map[string]webhook.Handler{"/mutate": labeler("mutated")})
	f.installConfig(nil, hook{name: "pods.a.webhook.test", url: r.url("/mutate"), resource: "pods"})
	f.mutatedPod("mutated")
	before, err := f.stored(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// A hand edit that breaks the key.
	broken := before.secret.DeepCopy()
	broken.Data[webhook.KeySignerKey] = []byte("not a key")
	if _, err := f.admin.CoreV1().Secrets(f.id).Update(t.Context(), broken, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new CA and certificate stored, served and in the configuration", func(ctx context.Context) (bool, error) {
		s, err := f.stored(ctx)
		if err != nil || s.signer == nil || s.signer.Equal(before.signer) || len(s.bundle) != 1 {
			return false, err
		}
		if ok, err := servesAll(ctx, s.serving, r); !ok || err != nil {
			return false, err
		}
		return f.configCarries(ctx, s.secret.Data[webhook.KeyCABundle])
	})
	f.mutatedPod("mutated")
	if got := metric(t, r.reg, writes, map[string]string{"step": "created"}); got != 2 {
		t.Errorf("%s{step=created} = %v, want 2 (the creation and the replacement)", writes, got)
	}
}

// TestAnotherInstallsWebhookKeepsItsCABundle: two installs whose
// configurations share a name would each patch the other's caBundle back
// without end. A manager sets the bundle only of the webhooks that call its
// own Service (or a URL), and says so when none does.
func TestAnotherInstallsWebhookKeepsItsCABundle(t *testing.T) {
	f := newFixture(t, false)
	ctx := t.Context()
	theirs := []byte("-----BEGIN CERTIFICATE-----\nbm90IG91cnM=\n-----END CERTIFICATE-----\n")
	ignore := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	webhookFor := func(name string, cc admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name: name, ClientConfig: cc, AdmissionReviewVersions: []string{"v1"}, SideEffects: &none, FailurePolicy: &ignore,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			// No namespace carries this label: nothing in the test calls them.
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{testLabel: "nobody"}},
		}
	}
	service := func(ns, name string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: name}, CABundle: theirs}
	}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: f.configName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			webhookFor("ours.webhook.test", service(f.id, serviceName)),
			webhookFor("theirs.webhook.test", service("another-install", serviceName)),
		},
	}
	configs := f.admin.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := configs.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := f.startReplica("a", f.certOptions(), nil)
	bundles := func(ctx context.Context) (map[string]string, error) {
		got, err := configs.Get(ctx, f.configName, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, wh := range got.Webhooks {
			out[wh.Name] = string(wh.ClientConfig.CABundle)
		}
		return out, nil
	}
	waitFor(t, "the bundle on the webhook that calls the manager's Service", func(ctx context.Context) (bool, error) {
		c, ok := r.m.Certificates()
		if !ok {
			return false, nil
		}
		b, err := bundles(ctx)
		return err == nil && b["ours.webhook.test"] == string(c.CABundle) && r.m.Err() == nil, err
	})
	if b, err := bundles(ctx); err != nil || b["theirs.webhook.test"] != string(theirs) {
		t.Errorf("the other install's webhook carries %q (%v), want its own bundle kept", b["theirs.webhook.test"], err)
	}

	// A configuration with none of the manager's webhooks is an error that
	// names them, and nothing is patched.
	got, err := configs.Get(ctx, f.configName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Webhooks = got.Webhooks[1:]
	if _, err := configs.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Err naming the other install's webhook", func(context.Context) (bool, error) {
		err := r.m.Err()
		return err != nil && strings.Contains(err.Error(), "theirs.webhook.test (Service another-install/"+serviceName+")"), nil
	})
	if b, err := bundles(ctx); err != nil || b["theirs.webhook.test"] != string(theirs) {
		t.Errorf("the other install's webhook carries %q (%v), want its own bundle kept", b["theirs.webhook.test"], err)
	}
}
