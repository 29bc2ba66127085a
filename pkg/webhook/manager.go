package webhook

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Defaults of CertOptions.
const (
	// DefaultCAValidity is how long a new CA is valid: a year.
	DefaultCAValidity = 365 * 24 * time.Hour
	// DefaultServingValidity is how long a serving certificate is valid: 90 days.
	DefaultServingValidity = 90 * 24 * time.Hour
	// DefaultPropagationDelay is how long each step of a CA rotation waits
	// for the cluster to catch up with the step before: the apiserver to
	// load the new caBundle (seconds), every replica to re-read the Secret
	// (a watch event, or ResyncInterval at worst).
	DefaultPropagationDelay = 5 * time.Minute
	// DefaultResyncInterval is how often the Secret and the webhook
	// configuration are read again when no watch event came.
	DefaultResyncInterval = time.Minute
	// DefaultClusterDomain is the cluster's DNS domain.
	DefaultClusterDomain = "cluster.local"
)

// gateRetry is how soon a rotation step whose check said "not yet" is tried
// again.
const gateRetry = time.Second

// maxSteps bounds the steps one sync takes; a fresh Secret needs one.
const maxSteps = 8

// FieldManager is the field manager of the manager's writes.
const FieldManager = "handlerkit-webhook"

// CertOptions configures a CertManager. Namespace, SecretName and, unless
// ExternalCerts, ServiceName are required.
type CertOptions struct {
	// Namespace is the operator's own namespace, where the Secret lives.
	Namespace string
	// SecretName names the Secret holding the CA and serving certificate.
	SecretName string
	// ServiceName is the webhook's Service; the serving certificate names
	// <ServiceName>.<Namespace>.svc and <ServiceName>.<Namespace>.svc.<ClusterDomain>.
	ServiceName string
	// ClusterDomain is the cluster's DNS domain. Default: DefaultClusterDomain.
	ClusterDomain string
	// ExtraDNSNames and ExtraIPs are added to the serving certificate, for
	// example 127.0.0.1 for a webhook the apiserver calls by URL in tests.
	ExtraDNSNames []string
	ExtraIPs      []net.IP
	// WebhookConfigName names the MutatingWebhookConfiguration whose
	// webhooks[*].clientConfig.caBundle is kept equal to the Secret's
	// bundle. The configuration itself comes from the manifests; while it is
	// missing, Err says so and the manager retries. "" keeps no configuration.
	WebhookConfigName string
	// ExternalCerts says another issuer (cert-manager) writes the Secret: the
	// manager never creates, rotates or injects anything, it only reads the
	// Secret's tls.crt and tls.key and serves them.
	ExternalCerts bool

	// CAValidity and ServingValidity are how long new certificates are
	// valid. Defaults: DefaultCAValidity, DefaultServingValidity.
	CAValidity, ServingValidity time.Duration
	// CARenewBefore and ServingRenewBefore are how long before its expiry a
	// certificate is replaced. Defaults: a third of the validity (a CA of a
	// year is replaced after eight months). ServingRenewBefore must be
	// shorter than CARenewBefore, so that the CA is always replaced first.
	CARenewBefore, ServingRenewBefore time.Duration
	// PropagationDelay is how long each step of a CA rotation waits for the
	// step before to reach the cluster. Default: DefaultPropagationDelay.
	PropagationDelay time.Duration
	// ResyncInterval is how often the Secret and the configuration are read
	// again without a watch event. Default: DefaultResyncInterval.
	ResyncInterval time.Duration
	// StepCheck, when set, must also return nil before the rotation step
	// is taken; an error means "not yet" and the step is tried again a
	// second later. It lets a caller that can see more of the cluster (a
	// test that probes the apiserver, say) replace waiting by knowing.
	StepCheck func(ctx context.Context, step Step, certs Certificates) error

	// Logger logs each change of the Secret and each error. Default:
	// logrus.StandardLogger().
	Logger logrus.FieldLogger
	// Registerer receives the manager's metrics. Default:
	// prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer
}

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

// NewCertManager checks opts and fills in their defaults. Nothing is read
// or written before Run.
func NewCertManager(client kubernetes.Interface, opts CertOptions) (*CertManager, error) {
	if client == nil {
		return nil, errors.New("webhook: nil client")
	}
	o := opts
	if o.Namespace == "" || o.SecretName == "" {
		return nil, errors.New("webhook: CertOptions need Namespace and SecretName")
	}
	if o.ServiceName == "" && !o.ExternalCerts {
		return nil, errors.New("webhook: CertOptions need ServiceName (the serving certificate names its Service)")
	}
	if o.ClusterDomain == "" {
		o.ClusterDomain = DefaultClusterDomain
	}
	if o.CAValidity == 0 {
		o.CAValidity = DefaultCAValidity
	}
	if o.ServingValidity == 0 {
		o.ServingValidity = DefaultServingValidity
	}
	if o.CARenewBefore == 0 {
		o.CARenewBefore = o.CAValidity / 3
	}
	if o.ServingRenewBefore == 0 {
		o.ServingRenewBefore = o.ServingValidity / 3
	}
	if o.PropagationDelay == 0 {
		o.PropagationDelay = DefaultPropagationDelay
	}
	if o.ResyncInterval == 0 {
		o.ResyncInterval = DefaultResyncInterval
	}
	if o.Logger == nil {
		o.Logger = logrus.StandardLogger()
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.DefaultRegisterer
	}
	switch {
	case o.CAValidity < 0 || o.ServingValidity < 0 || o.CARenewBefore < 0 || o.ServingRenewBefore < 0 || o.PropagationDelay < 0 || o.ResyncInterval < 0:
		return nil, errors.New("webhook: negative durations in CertOptions")
	case o.CARenewBefore >= o.CAValidity:
		return nil, fmt.Errorf("webhook: CARenewBefore %s must be shorter than CAValidity %s", o.CARenewBefore, o.CAValidity)
	case o.ServingRenewBefore >= o.ServingValidity:
		return nil, fmt.Errorf("webhook: ServingRenewBefore %s must be shorter than ServingValidity %s", o.ServingRenewBefore, o.ServingValidity)
	case o.ServingRenewBefore >= o.CARenewBefore:
		// A serving certificate never outlives its CA; renewing it sooner
		// than the CA would issue the same short certificate again and again.
		return nil, fmt.Errorf("webhook: ServingRenewBefore %s must be shorter than CARenewBefore %s", o.ServingRenewBefore, o.CARenewBefore)
	case 2*o.PropagationDelay >= o.ServingRenewBefore:
		return nil, fmt.Errorf("webhook: a CA rotation (twice PropagationDelay %s) must fit in ServingRenewBefore %s", o.PropagationDelay, o.ServingRenewBefore)
	}
	names := []string{
		fmt.Sprintf("%s.%s.svc", o.ServiceName, o.Namespace),
		fmt.Sprintf("%s.%s.svc.%s", o.ServiceName, o.Namespace, o.ClusterDomain),
	}
	for _, n := range o.ExtraDNSNames {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	m := &CertManager{
		client: client,
		o:      o,
		p: policy{
			caValidity: o.CAValidity, caRenewBefore: o.CARenewBefore,
			servingValidity: o.ServingValidity, servingRenewBefore: o.ServingRenewBefore,
			delay: o.PropagationDelay, names: names, ips: slices.Clone(o.ExtraIPs),
		},
		log:  o.Logger.WithField("secret", o.Namespace+"/"+o.SecretName),
		wake: make(chan struct{}, 1),
	}
	var err error
	if m.metrics, err = newCertMetrics(o.Registerer); err != nil {
		return nil, err
	}
	return m, nil
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

// Run keeps the Secret and the configuration in order until ctx ends. It
// watches both, so that a change is served at once, and reads them again
// every ResyncInterval. Errors are logged, reported by Err and retried with
// a growing delay; Run returns nil when ctx ends and an error only when it
// was already running.
func (m *CertManager) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("webhook: CertManager is already running")
	}
	defer m.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	poke := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.poke() },
		UpdateFunc: func(any, any) { m.poke() },
		DeleteFunc: func(any) { m.poke() },
	}
	informers := []cache.SharedIndexInformer{m.secretInformer()}
	if m.o.WebhookConfigName != "" && !m.o.ExternalCerts {
		informers = append(informers, m.configInformer())
	}
	for _, inf := range informers {
		if _, err := inf.AddEventHandler(poke); err != nil {
			return fmt.Errorf("webhook: %w", err)
		}
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	const firstBackoff = 500 * time.Millisecond
	backoff := firstBackoff
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		wake, err := m.sync(ctx)
		if ctx.Err() != nil {
			return nil
		}
		m.report(err)
		next := m.o.ResyncInterval
		if err != nil {
			next, backoff = backoff, min(2*backoff, m.o.ResyncInterval)
		} else {
			backoff = firstBackoff
			if !wake.IsZero() {
				next = min(next, max(time.Until(wake), 0))
			}
		}
		// Since Go 1.23 Reset discards a value the timer sent before.
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return nil
		case <-m.wake:
		case <-timer.C:
		}
	}
}

// poke makes Run look again at once.
func (m *CertManager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// report records err and logs it when it is new.
func (m *CertManager) report(err error) {
	m.mu.Lock()
	m.err = err
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	repeated := msg == m.lastLog
	m.lastLog = msg
	m.mu.Unlock()
	if err == nil {
		return
	}
	m.metrics.errors.Inc()
	if repeated {
		m.log.WithError(err).Debug("webhook certificates: still failing; retrying")
		return
	}
	m.log.WithError(err).Error("webhook certificates: retrying")
}

func (m *CertManager) secretInformer() cache.SharedIndexInformer {
	sel := fields.OneTermEqualSelector("metadata.name", m.o.SecretName).String()
	secrets := m.client.CoreV1().Secrets(m.o.Namespace)
	return cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = sel
			return secrets.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = sel
			return secrets.Watch(ctx, opts)
		},
	}, &corev1.Secret{}, 0, cache.Indexers{})
}

func (m *CertManager) configInformer() cache.SharedIndexInformer {
	sel := fields.OneTermEqualSelector("metadata.name", m.o.WebhookConfigName).String()
	configs := m.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	return cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = sel
			return configs.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = sel
			return configs.Watch(ctx, opts)
		},
	}, &admissionregistrationv1.MutatingWebhookConfiguration{}, 0, cache.Indexers{})
}

// errRetry makes sync read the Secret again at once.
var errRetry = errors.New("retry")

// sync reads the Secret, takes the steps that are due, serves the result and
// keeps the configuration's caBundle. It returns when to look again.
func (m *CertManager) sync(ctx context.Context) (time.Time, error) {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	var (
		wake      time.Time
		bundleErr error
	)
	for range maxSteps {
		var st *state
		var err error
		st, wake, bundleErr, err = m.step(ctx)
		if errors.Is(err, errRetry) {
			continue
		}
		if err != nil {
			return time.Time{}, err
		}
		if st == nil { // a step was taken: look again
			continue
		}
		return wake, bundleErr
	}
	// Every replica kept changing the Secret; look again soon.
	return time.Now().Add(gateRetry), bundleErr
}

// step does one read and at most one write of the Secret. It returns the
// loaded state when nothing more is due now, or nil after a write.
func (m *CertManager) step(ctx context.Context) (st *state, wake time.Time, bundleErr, err error) {
	secrets := m.client.CoreV1().Secrets(m.o.Namespace)
	sec, err := secrets.Get(ctx, m.o.SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if m.o.ExternalCerts {
			return nil, time.Time{}, nil, fmt.Errorf("webhook: Secret %s/%s not found: with ExternalCerts another issuer (cert-manager) creates it", m.o.Namespace, m.o.SecretName)
		}
		return nil, time.Time{}, nil, m.create(ctx)
	}
	if err != nil {
		return nil, time.Time{}, nil, fmt.Errorf("webhook: reading Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, err)
	}
	cur, perr := parseState(sec, m.o.ExternalCerts)
	if m.o.ExternalCerts {
		if perr != nil {
			return nil, time.Time{}, nil, fmt.Errorf("webhook: Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, perr)
		}
		m.load(cur)
		return cur, time.Time{}, nil, nil
	}
	if perr != nil {
		m.log.WithError(perr).Warn("webhook certificates: the Secret holds no valid certificates; replacing them")
		cur = nil
	} else {
		m.load(cur)
		if m.o.WebhookConfigName != "" {
			bundleErr = m.injectBundle(ctx, cur.bundlePEM())
		}
	}
	now := time.Now()
	d := decide(cur, now, m.p)
	if d.step == stepNone {
		return cur, d.wake, bundleErr, nil
	}
	if g := d.step.gate(); g != "" {
		if at, err := m.gateOpen(ctx, g, cur, now); err != nil {
			m.log.WithField("step", g).Debugf("webhook certificates: waiting: %v", err)
			return cur, at, bundleErr, nil
		}
	}
	next, err := apply(cur, d.step, now, m.p)
	if err != nil {
		return nil, time.Time{}, bundleErr, err
	}
	upd := sec.DeepCopy()
	if cur == nil {
		// Keep nothing of content we cannot read.
		upd.Data = nil
	}
	next.fill(upd)
	if _, err := secrets.Update(ctx, upd, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		if apierrors.IsConflict(err) {
			// Another replica changed it first; its result is read next.
			return nil, time.Time{}, bundleErr, errRetry
		}
		return nil, time.Time{}, bundleErr, fmt.Errorf("webhook: updating Secret %s/%s (%s): %w", m.o.Namespace, m.o.SecretName, d.step, err)
	}
	m.metrics.writes.WithLabelValues(d.step.String()).Inc()
	m.log.WithField("step", d.step.String()).Infof("webhook certificates: %s", d.reason)
	return nil, time.Time{}, bundleErr, nil
}

// create makes the Secret. When another replica created it first the
// apiserver says AlreadyExists, and the caller reads theirs.
func (m *CertManager) create(ctx context.Context) error {
	st, err := apply(nil, stepFresh, time.Now(), m.p)
	if err != nil {
		return err
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: m.o.Namespace, Name: m.o.SecretName,
		Labels: map[string]string{"app.kubernetes.io/component": "webhook-certificates"}}}
	st.fill(sec)
	_, err = m.client.CoreV1().Secrets(m.o.Namespace).Create(ctx, sec, metav1.CreateOptions{FieldManager: FieldManager})
	switch {
	case apierrors.IsAlreadyExists(err):
		return errRetry
	case err != nil:
		return fmt.Errorf("webhook: creating Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, err)
	}
	m.metrics.writes.WithLabelValues(stepFresh.String()).Inc()
	m.log.WithField("step", stepFresh.String()).Info("webhook certificates: created a CA and a serving certificate")
	return errRetry
}

// gateOpen returns nil when the gated step may be taken, or why not and
// when to look again.
func (m *CertManager) gateOpen(ctx context.Context, g Step, st *state, now time.Time) (time.Time, error) {
	if g == StepServeNewCA && m.o.WebhookConfigName != "" {
		// The delay since the CA joined the Secret does not count while
		// the configuration did not carry it (a missing configuration, a
		// failed patch): the apiserver trusts only what it was given.
		m.mu.Lock()
		seen, at := m.seenHash == sha256.Sum256(st.bundlePEM()), m.seenAt
		m.mu.Unlock()
		if !seen || at.IsZero() {
			return now.Add(gateRetry), errors.New("the webhook configuration does not carry the new bundle yet")
		}
		if ready := at.Add(m.o.PropagationDelay); now.Before(ready) {
			return ready, fmt.Errorf("the webhook configuration carries the new bundle since %s", at.Format(time.RFC3339))
		}
	}
	if m.o.StepCheck != nil {
		if err := m.o.StepCheck(ctx, g, st.certificates()); err != nil {
			return now.Add(gateRetry), err
		}
	}
	return time.Time{}, nil
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

// injectBundle makes every webhook of the configuration that calls this
// manager's Service (or a URL) carry bundle, patching only the ones that
// differ. A webhook that calls another Service is another install's: its
// caBundle is left alone, so that two installs sharing a configuration
// name do not patch it back and forth without end.
func (m *CertManager) injectBundle(ctx context.Context, bundle []byte) error {
	configs := m.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cfg, err := configs.Get(ctx, m.o.WebhookConfigName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		m.markSeen(nil, time.Time{})
		return fmt.Errorf("webhook: MutatingWebhookConfiguration %s not found: it comes with the operator's manifests (or Helm chart); its caBundle is set once it exists", m.o.WebhookConfigName)
	}
	if err != nil {
		return fmt.Errorf("webhook: reading MutatingWebhookConfiguration %s: %w", m.o.WebhookConfigName, err)
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	var ops []op
	var others []string
	for i, wh := range cfg.Webhooks {
		if svc := wh.ClientConfig.Service; svc != nil && (svc.Namespace != m.o.Namespace || svc.Name != m.o.ServiceName) {
			others = append(others, fmt.Sprintf("%s (Service %s/%s)", wh.Name, svc.Namespace, svc.Name))
			continue
		}
		if equalBundles(wh.ClientConfig.CABundle, bundle) {
			continue
		}
		// The test keeps the patch from landing on another webhook when
		// the list changed since the read.
		ops = append(ops,
			op{Op: "test", Path: fmt.Sprintf("/webhooks/%d/name", i), Value: wh.Name},
			op{Op: "add", Path: fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), Value: bundle})
	}
	if len(others) == len(cfg.Webhooks) {
		m.markSeen(nil, time.Time{})
		if len(others) == 0 {
			others = []string{"no webhooks"}
		}
		return fmt.Errorf("webhook: no webhook of MutatingWebhookConfiguration %s calls Service %s/%s (it has %s): another install's configuration of the same name? Give each install its own",
			cfg.Name, m.o.Namespace, m.o.ServiceName, strings.Join(others, ", "))
	}
	if len(ops) == 0 {
		m.markSeen(bundle, time.Now())
		return nil
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	if _, err := configs.Patch(ctx, cfg.Name, types.JSONPatchType, data, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		m.markSeen(nil, time.Time{})
		return fmt.Errorf("webhook: setting the caBundle of MutatingWebhookConfiguration %s: %w", cfg.Name, err)
	}
	m.log.WithField("webhookConfiguration", cfg.Name).Infof("webhook certificates: caBundle set (%d webhooks)", len(ops)/2)
	// Until now the configuration carried something else, even when it
	// carried this bundle before (an apply that reset it, say).
	m.markSeen(nil, time.Time{})
	m.markSeen(bundle, time.Now())
	return nil
}

// markSeen records that the configuration carries bundle (nil: something
// else), keeping the earlier time when it carried it already.
func (m *CertManager) markSeen(bundle []byte, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if bundle == nil {
		m.seenHash, m.seenAt = [sha256.Size]byte{}, time.Time{}
		return
	}
	h := sha256.Sum256(bundle)
	if h != m.seenHash || m.seenAt.IsZero() {
		m.seenHash, m.seenAt = h, now
	}
}

// RotateCA starts a rotation of the CA now, as if it were due: a new CA
// joins the bundle; the serving certificate follows after
// PropagationDelay, and the old CA leaves the bundle after PropagationDelay
// again (Run takes those steps). It is for tests and for an operator who
// suspects the CA key leaked.
func (m *CertManager) RotateCA(ctx context.Context) error { return m.force(ctx, stepNewCA) }

// RotateServing replaces the serving certificate now with one from the
// same CA. During a CA rotation it fails: the next serving certificate then
// comes from the new CA once callers trust it.
func (m *CertManager) RotateServing(ctx context.Context) error {
	return m.force(ctx, stepRenewServing)
}

func (m *CertManager) force(ctx context.Context, s step) error {
	if m.o.ExternalCerts {
		return errors.New("webhook: with ExternalCerts the issuer rotates the certificates")
	}
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	defer m.poke()
	secrets := m.client.CoreV1().Secrets(m.o.Namespace)
	for {
		sec, err := secrets.Get(ctx, m.o.SecretName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("webhook: reading Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, err)
		}
		cur, err := parseState(sec, false)
		if err != nil {
			return fmt.Errorf("webhook: Secret %s/%s: %w", m.o.Namespace, m.o.SecretName, err)
		}
		if s == stepRenewServing {
			if issuer := issuerOf(cur.serving.cert, cur.bundle); issuer == nil || !issuer.Equal(cur.signer.cert) {
				return errors.New("webhook: a CA rotation is under way; its serving certificate follows once callers trust the new CA")
			}
		}
		next, err := apply(cur, s, time.Now(), m.p)
		if err != nil {
			return err
		}
		upd := sec.DeepCopy()
		next.fill(upd)
		_, err = secrets.Update(ctx, upd, metav1.UpdateOptions{FieldManager: FieldManager})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("webhook: updating Secret %s/%s (%s): %w", m.o.Namespace, m.o.SecretName, s, err)
		}
		m.metrics.writes.WithLabelValues(s.String()).Inc()
		m.log.WithField("step", s.String()).Info("webhook certificates: rotation asked for")
		return nil
	}
}

// certMetrics are a CertManager's metrics.
type certMetrics struct {
	expiry *prometheus.GaugeVec
	writes *prometheus.CounterVec
	errors prometheus.Counter
}

func newCertMetrics(reg prometheus.Registerer) (*certMetrics, error) {
	m := &certMetrics{
		expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "handlerkit_webhook_certificate_expiration_timestamp_seconds",
			Help: "When the served webhook certificate (serving) and the CA that signs new ones (ca) expire, in seconds since the epoch.",
		}, []string{"certificate"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handlerkit_webhook_certificate_writes_total",
			Help: "Changes of the webhook certificates' Secret made by this replica, by step: created, new-ca, serve-new-ca, renew-serving, drop-old-ca, stamp.",
		}, []string{"step"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "handlerkit_webhook_certificate_sync_errors_total",
			Help: "Failed looks at the webhook certificates' Secret and webhook configuration (each is retried).",
		}),
	}
	var err error
	if m.expiry, err = register(reg, m.expiry); err != nil {
		return nil, err
	}
	if m.writes, err = register(reg, m.writes); err != nil {
		return nil, err
	}
	if m.errors, err = register(reg, m.errors); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector registered before it under
// the same name (a second manager or server in one process).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("webhook: registering metrics: %w", err)
	}
	return c, nil
}
