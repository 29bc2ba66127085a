package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/inject/imageenv"
	"github.com/handlerkit/handlerkit/pkg/leader"
	"github.com/handlerkit/handlerkit/pkg/webhook"
)

// The webhook's names, shared with deploy/operator/webhook.yaml, the RBAC
// that names the Secret and the configuration, and the Helm chart (for its
// default release name).
const (
	defaultWebhookService       = "prometheus-jmx-exporter-operator-webhook"
	defaultWebhookSecret        = "prometheus-jmx-exporter-operator-webhook-tls"
	defaultWebhookConfiguration = "prometheus-jmx-exporter-operator"
	// webhookPath is the path the configuration's clientConfig names.
	webhookPath = "/mutate-pods"
)

// The values of --webhook and --at-start-delivery.
const (
	webhookOn             = "on"
	webhookOff            = "off"
	deliveryImageVolume   = "image-volume"
	deliveryInitContainer = "init-container"
)

// The values of --at-start-image-config and --at-start-unreadable-image.
const (
	imageConfigAnonymous = "anonymous"
	imageConfigOff       = "off"
	unreadableInject     = "inject"
	unreadableSkip       = "skip"
)

// webhookConfig is the webhook's part of the command line.
type webhookConfig struct {
	mode          string
	addr          string
	service       string
	secret        string
	configuration string
	externalCerts bool
	delivery      string
	imageConfig   string
	unreadable    string
	set           bool // --webhook or WEBHOOK given: on means on, or the start fails
}

// webhookFlags defines the webhook's flags on fs.
func webhookFlags(fs *flag.FlagSet, w *webhookConfig) {
	fs.StringVar(&w.mode, "webhook", webhookOn,
		"the pod-mutating admission webhook that gives new pods the agent at their JVMs' start (exporters with spec.injection.mode AtStart or Both), served by every replica: on or off. On by default, but left off with a warning when the operator may not read its Secret or patch its configuration (checked at start; given explicitly, that is an error); off starts none of it, needs no Secret or MutatingWebhookConfiguration access, and no pod is injected at start (env WEBHOOK)")
	fs.StringVar(&w.addr, "webhook-addr", webhook.DefaultAddr,
		"address the webhook's HTTPS server listens on; the webhook Service's targetPort (env WEBHOOK_ADDR)")
	fs.StringVar(&w.service, "webhook-service", defaultWebhookService,
		"the webhook's Service in the operator's namespace (POD_NAMESPACE), which the serving certificate names (env WEBHOOK_SERVICE)")
	fs.StringVar(&w.secret, "webhook-secret", defaultWebhookSecret,
		"the Secret in the operator's namespace that holds the webhook's CA and serving certificate; the operator creates and rotates it, or only reads it with --webhook-external-certs (env WEBHOOK_SECRET)")
	fs.StringVar(&w.configuration, "webhook-configuration", defaultWebhookConfiguration,
		"the MutatingWebhookConfiguration whose caBundle the operator keeps equal to its CA; it comes with the manifests (env WEBHOOK_CONFIGURATION)")
	fs.BoolVar(&w.externalCerts, "webhook-external-certs", false,
		"another issuer (cert-manager) writes --webhook-secret (tls.crt, tls.key) and the configuration's caBundle: the operator only reads and serves the Secret, and needs no write access to it and none to the configuration (env WEBHOOK_EXTERNAL_CERTS)")
	fs.StringVar(&w.delivery, "at-start-delivery", deliveryImageVolume,
		"how a pod injected at start gets the agent jar: image-volume (the agent image mounted read-only; Kubernetes 1.36+, containerd 2.1+) or init-container (copied into an emptyDir by an init container, for nodes without image volumes) (env AT_START_DELIVERY)")
	fs.StringVar(&w.imageConfig, "at-start-image-config", imageConfigAnonymous,
		"before it injects a container at start, the webhook reads its image's config from the image's registry, so that an image's own JAVA_TOOL_OPTIONS is kept before the agent's option (a pod's env entry would replace it): anonymous (no credentials; within 2s, each image kept 10m) or off (never read: an image's JAVA_TOOL_OPTIONS is replaced, silently) (env AT_START_IMAGE_CONFIG)")
	fs.StringVar(&w.unreadable, "at-start-unreadable-image", unreadableInject,
		"what the webhook does with a container whose image's config it cannot read (no registry reachable, credentials needed, no answer in time): inject (the agent's option replaces the image's JAVA_TOOL_OPTIONS if it sets one; the pod's at-start-notes annotation and the creation's warnings say so) or skip (the container is left alone, and the annotation says why) (env AT_START_UNREADABLE_IMAGE)")
}

// on says whether the webhook runs.
func (w webhookConfig) on() bool { return w.mode == webhookOn }

// check refuses webhook flags that cannot work, naming the flag.
func (w webhookConfig) check() error {
	switch w.mode {
	case webhookOn, webhookOff:
	default:
		return fmt.Errorf("--webhook %q: want on or off", w.mode)
	}
	switch w.delivery {
	case deliveryImageVolume, deliveryInitContainer:
	default:
		return fmt.Errorf("--at-start-delivery %q: want image-volume or init-container", w.delivery)
	}
	switch w.imageConfig {
	case imageConfigAnonymous, imageConfigOff:
	default:
		return fmt.Errorf("--at-start-image-config %q: want anonymous or off", w.imageConfig)
	}
	switch w.unreadable {
	case unreadableInject, unreadableSkip:
	default:
		return fmt.Errorf("--at-start-unreadable-image %q: want inject or skip", w.unreadable)
	}
	if !w.on() {
		return nil
	}
	_, port, err := net.SplitHostPort(w.addr)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 {
		return fmt.Errorf("--webhook-addr %q: want [host]:port with a port from 1 to 65535", w.addr)
	}
	if msgs := validation.IsDNS1035Label(w.service); len(msgs) > 0 {
		return fmt.Errorf("--webhook-service %q is not a Service name: %s", w.service, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(w.secret); len(msgs) > 0 {
		return fmt.Errorf("--webhook-secret %q is not a Secret name: %s", w.secret, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(w.configuration); len(msgs) > 0 && !w.externalCerts {
		return fmt.Errorf("--webhook-configuration %q is not a MutatingWebhookConfiguration name: %s", w.configuration, strings.Join(msgs, "; "))
	}
	return nil
}

// atstartDelivery is --at-start-delivery as the mutation names it.
func (w webhookConfig) atstartDelivery() atstart.Delivery {
	if w.delivery == deliveryInitContainer {
		return atstart.DeliveryInitContainer
	}
	return atstart.DeliveryImageVolume
}

// chooser is choose, with the containers' images read first (imageenv)
// unless --at-start-image-config is off.
func (w webhookConfig) chooser(choose atstart.Chooser, log logrus.FieldLogger) (atstart.Chooser, error) {
	if w.imageConfig == imageConfigOff {
		return choose, nil
	}
	r, err := imageenv.New(imageenv.Options{Logf: log.Infof})
	if err != nil {
		return nil, err
	}
	policy := atstart.UnreadableInject
	if w.unreadable == unreadableSkip {
		policy = atstart.UnreadableSkip
	}
	return imageenv.Chooser(r, policy, choose), nil
}

// webhookRun is the webhook of one replica: the certificates it serves and,
// once started, the server.
type webhookRun struct {
	c      webhookConfig
	certs  *webhook.CertManager
	client kubernetes.Interface
	reg    prometheus.Registerer
	log    logrus.FieldLogger
}

// newWebhook makes the webhook's certificate manager; nothing is written
// before start. The Secret lives in the operator's own namespace:
// POD_NAMESPACE (the manifests set it from the downward API), else the
// mounted service account's. It first asks the API server whether the
// operator may do what the manager does (webhookGranted). When it may not,
// or runs outside a cluster, a webhook that is on only by default is left
// off, with a warning that says what is missing, so that an install whose
// RBAC predates the webhook runs as before (nil, nil); one asked for with
// --webhook=on (or WEBHOOK=on) is an error.
func newWebhook(ctx context.Context, cfg *rest.Config, c config, owner *metav1.OwnerReference, reg prometheus.Registerer, log logrus.FieldLogger) (*webhookRun, error) {
	ns := leader.DefaultNamespace()
	if ns == "" {
		return noWebhook(c, log, "the operator's namespace, where its certificate Secret and webhook Service are, is unknown: "+
			"POD_NAMESPACE is not set and no service account is mounted (not in a cluster?)")
	}
	client, err := kubernetes.NewForConfig(webhookClientConfig(cfg, c))
	if err != nil {
		return nil, err
	}
	return setupWebhook(ctx, client, ns, c, owner, reg, log)
}

// webhookClientConfig is cfg with the operator's client-side rate limit
// (--kube-api-qps, --kube-api-burst; by default none) rather than
// client-go's default of 5 requests a second: the webhook's dry runs are one
// request per pod created, and a burst of creations queued behind that limit
// past the API server's timeout, so that pods were created without the agent
// (e2e TestABurstOfPodCreationsGetsTheAgentOnTheNode: 58 of 200).
func webhookClientConfig(cfg *rest.Config, c config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.QPS, out.Burst = float32(c.kubeAPIQPS), c.kubeAPIBurst
	return out
}

// noWebhook is what the webhook cannot run for why: nothing but a warning
// when it is on by default, an error when it was asked for.
func noWebhook(c config, log logrus.FieldLogger, why string) (*webhookRun, error) {
	if c.webhook.set {
		return nil, fmt.Errorf("--webhook=on: %s; grant it (deploy/operator/rbac-webhook.yaml) or set --webhook=off", why)
	}
	log.Warnf("the admission webhook is off: %s; no pod gets the agent at start (spec.injection.mode AtStart or Both) "+
		"until it is granted (deploy/operator/rbac-webhook.yaml, the Helm chart's webhook.enabled); --webhook=off silences this", why)
	return nil, nil
}

// setupWebhook is newWebhook once the namespace and client are known. owner,
// when known (ownDeployment), owns the Secret of the operator's own CA.
func setupWebhook(ctx context.Context, client kubernetes.Interface, ns string, c config, owner *metav1.OwnerReference, reg prometheus.Registerer, log logrus.FieldLogger) (*webhookRun, error) {
	denied, err := webhookGranted(ctx, client, ns, c.webhook)
	if err != nil {
		return nil, fmt.Errorf("webhook: asking the API server what the operator may do: %w", err)
	}
	if len(denied) > 0 {
		return noWebhook(c, log, "the operator may not "+strings.Join(denied, ", "))
	}
	opts := webhook.CertOptions{
		Namespace:     ns,
		SecretName:    c.webhook.secret,
		ServiceName:   c.webhook.service,
		ExternalCerts: c.webhook.externalCerts,
		Owner:         owner,
		Logger:        log.WithField("component", "webhook"),
		Registerer:    reg,
	}
	if !c.webhook.externalCerts {
		opts.WebhookConfigName = c.webhook.configuration
	}
	certs, err := webhook.NewCertManager(client, opts)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	return &webhookRun{c: c.webhook, certs: certs, client: client, reg: reg, log: opts.Logger}, nil
}

// webhookGranted asks the API server (SelfSubjectAccessReviews, which every
// authenticated user may make) whether the operator may make the requests of
// the webhook's certificate manager, exactly webhook.PolicyRules and
// webhook.ClusterPolicyRules for its names, and returns those it may not. An
// answer the API server does not give (it is unreachable) is an error after a
// few tries, never taken as a denial.
func webhookGranted(ctx context.Context, client kubernetes.Interface, ns string, w webhookConfig) (denied []string, err error) {
	type ask struct {
		attrs authorizationv1.ResourceAttributes
		what  string
	}
	var asks []ask
	for _, rule := range webhook.PolicyRules(w.secret, w.externalCerts) {
		for _, verb := range rule.Verbs {
			name := ""
			if len(rule.ResourceNames) > 0 {
				name = rule.ResourceNames[0]
			}
			asks = append(asks, ask{authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: "secrets", Name: name},
				fmt.Sprintf("%s Secret %s/%s", verb, ns, name)})
		}
	}
	if !w.externalCerts {
		for _, rule := range webhook.ClusterPolicyRules(w.configuration) {
			for _, verb := range rule.Verbs {
				asks = append(asks, ask{authorizationv1.ResourceAttributes{Verb: verb, Group: rule.APIGroups[0],
					Resource: rule.Resources[0], Name: w.configuration},
					fmt.Sprintf("%s MutatingWebhookConfiguration %s", verb, w.configuration)})
			}
		}
	}
	for _, a := range asks {
		var allowed bool
		for try := 0; ; try++ {
			r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &a.attrs}}, metav1.CreateOptions{})
			if err == nil {
				allowed = r.Status.Allowed
				break
			}
			if try == 4 || ctx.Err() != nil {
				return nil, err
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(1<<try) * 500 * time.Millisecond):
			}
		}
		if !allowed {
			denied = append(denied, strings.TrimSuffix(a.what, "/"))
		}
	}
	return denied, nil
}

// ready is the webhook's part of /readyz: a replica is ready to take
// admission requests once it has a serving certificate. The error says what
// is missing, and why when the manager knows (a Secret it may not read).
func (h *webhookRun) ready() error {
	err := h.certs.Ready()
	if err == nil {
		return nil
	}
	return fmt.Errorf("webhook (--webhook=off switches it off): %w", err)
}

// start binds the webhook's server, so that a port in use fails the start,
// and runs the certificate manager and the server until ctx ends. The
// returned function waits for both to stop.
//
// Every patch that gives the agent is first created with dryRun All
// (atstart.Checker, docs/atstart.md): a delivery the cluster refuses gives
// way to the next, and a pod whose every delivery is refused, or whose dry
// run cannot be made, is created without the agent.
func (h *webhookRun) start(ctx context.Context, choose atstart.Chooser) (wait func(), err error) {
	choose, err = h.c.chooser(choose, h.log)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	checker, err := atstart.NewChecker(atstart.CheckerOptions{Client: h.client, Logger: h.log})
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	srv, err := webhook.NewServer(webhook.ServerOptions{
		Addr:           h.c.addr,
		GetCertificate: h.certs.GetCertificate,
		Handlers:       map[string]webhook.Handler{webhookPath: webhook.HandlerFunc(atstart.CheckedHandler(choose, checker))},
		Registerer:     h.reg,
		Logger:         h.log,
	})
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("webhook: --webhook-addr %s: %w", h.c.addr, err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := h.certs.Run(ctx); err != nil {
			h.log.WithError(err).Error("webhook certificates stopped")
		}
	}()
	go func() {
		defer wg.Done()
		if err := srv.Serve(ctx); err != nil {
			h.log.WithError(err).Error("webhook server stopped")
		}
	}()
	h.log.WithFields(logrus.Fields{"addr": srv.Addr(), "path": webhookPath, "secret": h.c.secret,
		"configuration": h.configurationName(), "externalCerts": h.c.externalCerts}).Info("serving the pod admission webhook")
	return wg.Wait, nil
}

func (h *webhookRun) configurationName() string {
	if h.c.externalCerts {
		return "(kept by its issuer)"
	}
	return h.c.configuration
}
