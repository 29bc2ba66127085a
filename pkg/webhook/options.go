package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
	// Owner, when set, is put in the owner references of the Secret the
	// manager creates, and added to an existing one it keeps, so that the
	// garbage collector deletes the Secret (and its CA's private key) with
	// the owner: usually the operator's Deployment (leader.DeploymentOwner),
	// which must be in Namespace. A reference the API server refuses is
	// logged once and left out. Not used with ExternalCerts.
	Owner *metav1.OwnerReference

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
