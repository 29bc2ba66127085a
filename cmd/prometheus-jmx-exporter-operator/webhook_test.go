package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
)

// TestWebhookFlagsDefaultToTheManifestsNames: the webhook is on by default,
// with the names deploy/operator/webhook.yaml and its RBAC use, and the
// environment sets every flag (the flags win).
func TestWebhookFlagsDefaultToTheManifestsNames(t *testing.T) {
	var out bytes.Buffer
	c, err := parseFlags(nil, &out)
	if err != nil {
		t.Fatal(err)
	}
	want := webhookConfig{mode: "on", addr: ":9443", service: "prometheus-jmx-exporter-operator-webhook",
		secret: "prometheus-jmx-exporter-operator-webhook-tls", configuration: "prometheus-jmx-exporter-operator", delivery: "image-volume",
		imageConfig: "anonymous", unreadable: "inject"}
	if c.webhook != want || c.webhook.atstartDelivery() != atstart.DeliveryImageVolume {
		t.Fatalf("defaults %+v, want %+v", c.webhook, want)
	}
	for k, v := range map[string]string{"WEBHOOK": "off", "WEBHOOK_ADDR": ":10443", "WEBHOOK_SERVICE": "hook", "WEBHOOK_SECRET": "hook-tls",
		"WEBHOOK_CONFIGURATION": "hook-config", "WEBHOOK_EXTERNAL_CERTS": "true", "AT_START_DELIVERY": "init-container",
		"AT_START_IMAGE_CONFIG": "off", "AT_START_UNREADABLE_IMAGE": "skip"} {
		t.Setenv(k, v)
	}
	if c, err = parseFlags([]string{"--webhook=on"}, &out); err != nil {
		t.Fatal(err)
	}
	want = webhookConfig{mode: "on", addr: ":10443", service: "hook", secret: "hook-tls", configuration: "hook-config",
		externalCerts: true, delivery: "init-container", imageConfig: "off", unreadable: "skip", set: true}
	if c.webhook != want || c.webhook.atstartDelivery() != atstart.DeliveryInitContainer {
		t.Fatalf("from the environment %+v, want %+v", c.webhook, want)
	}
	// Off: the webhook's other flags are not looked at.
	if _, err := parseFlags([]string{"--webhook=off", "--webhook-addr=nonsense"}, &out); err != nil {
		t.Fatalf("--webhook=off with an unused bad address: %v", err)
	}
}

// TestWebhookOnByDefaultStepsAsideWithoutItsNamespaceOrRBAC: on only by
// default, a webhook that cannot run (no namespace outside a pod, or RBAC
// that does not grant the certificate manager's requests, as an install
// made before the webhook) is left off with a warning naming what is
// missing, and the operator runs as before; asked for with --webhook=on (or
// WEBHOOK=on), the same is an error that says how to go on.
func TestWebhookOnByDefaultStepsAsideWithoutItsNamespaceOrRBAC(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	var out bytes.Buffer
	log := logrus.New()
	log.SetOutput(&out)
	def, err := parseFlags(nil, &out)
	if err != nil || def.webhook.set {
		t.Fatalf("defaults: %v, set %v", err, def.webhook.set)
	}
	h, err := newWebhook(t.Context(), &rest.Config{Host: "http://127.0.0.1:1"}, def, nil, prometheus.NewRegistry(), log)
	if h != nil || err != nil || !strings.Contains(out.String(), "the admission webhook is off") || !strings.Contains(out.String(), "POD_NAMESPACE") {
		t.Fatalf("by default, outside a pod: %v %v, log %q", h, err, out.String())
	}
	t.Setenv("WEBHOOK", "on")
	asked, err := parseFlags(nil, &out)
	if err != nil || !asked.webhook.set {
		t.Fatalf("WEBHOOK=on: %v, set %v", err, asked.webhook.set)
	}
	if _, err := newWebhook(t.Context(), &rest.Config{Host: "http://127.0.0.1:1"}, asked, nil, prometheus.NewRegistry(), log); err == nil ||
		!strings.Contains(err.Error(), "POD_NAMESPACE") || !strings.Contains(err.Error(), "--webhook=off") {
		t.Fatalf("asked for, outside a pod: %v", err)
	}

	// RBAC that grants all but the configuration's patch.
	client := fake.NewClientset()
	var asks []authorizationv1.ResourceAttributes
	client.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		asks = append(asks, *r.Spec.ResourceAttributes)
		r.Status.Allowed = !(r.Spec.ResourceAttributes.Resource == "mutatingwebhookconfigurations" && r.Spec.ResourceAttributes.Verb == "patch")
		return true, r, nil
	})
	out.Reset()
	h, err = setupWebhook(t.Context(), client, "operator", def, nil, prometheus.NewRegistry(), log)
	if h != nil || err != nil || !strings.Contains(out.String(), "may not patch MutatingWebhookConfiguration prometheus-jmx-exporter-operator") {
		t.Fatalf("by default, without the patch: %v %v, log %q", h, err, out.String())
	}
	if len(asks) != 9 {
		t.Errorf("asked %d SelfSubjectAccessReviews, want 9 (webhook.PolicyRules and ClusterPolicyRules, verb by verb): %+v", len(asks), asks)
	}
	for _, a := range asks {
		if a.Resource == "secrets" && (a.Namespace != "operator" || (a.Verb != "create" && a.Name != "prometheus-jmx-exporter-operator-webhook-tls")) {
			t.Errorf("asked %+v", a)
		}
	}
	if _, err := setupWebhook(t.Context(), client, "operator", asked, nil, prometheus.NewRegistry(), log); err == nil ||
		!strings.Contains(err.Error(), "may not patch MutatingWebhookConfiguration") {
		t.Fatalf("asked for, without the patch: %v", err)
	}
	// With cert-manager only the Secret's reads are asked about, and granted.
	external := def
	external.webhook.externalCerts = true
	asks = nil
	if h, err = setupWebhook(t.Context(), client, "operator", external, nil, prometheus.NewRegistry(), log); h == nil || err != nil {
		t.Fatalf("external certificates: %v %v", h, err)
	}
	if len(asks) != 3 {
		t.Errorf("external certificates: asked %+v, want get, list, watch of the Secret", asks)
	}
}

// TestWebhookStartReportsAPortInUseAndStopsWithItsContext: the server binds
// at start, so a port in use fails the operator's start naming the flag;
// until a certificate is loaded the replica is not ready, and says so; the
// certificate manager and the server stop when the context ends.
func TestWebhookStartReportsAPortInUseAndStopsWithItsContext(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var out bytes.Buffer
	c, err := parseFlags([]string{"--webhook-addr", taken.Addr().String()}, &out)
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(&out)
	// Every request is refused: the manager retries until the context ends.
	client := fake.NewClientset()
	client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetResource().Resource == "selfsubjectaccessreviews" {
			r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
			r.Status.Allowed = true
			return true, r, nil
		}
		return true, nil, errors.New("no API server here")
	})
	h, err := setupWebhook(t.Context(), client, "operator", c, nil, prometheus.NewRegistry(), log)
	if err != nil || h == nil {
		t.Fatalf("setupWebhook: %v %v", h, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	none := func(context.Context, *corev1.Pod) (atstart.Input, bool, error) { return atstart.Input{}, false, nil }
	if _, err := h.start(ctx, none); err == nil || !strings.Contains(err.Error(), "--webhook-addr "+taken.Addr().String()) {
		t.Fatalf("start on a port in use: %v", err)
	}

	h.c.addr = "127.0.0.1:0"
	wait, err := h.start(ctx, none)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.ready(); err == nil || !strings.Contains(err.Error(), "--webhook=off") {
		t.Errorf("ready without a certificate: %v", err)
	}
	cancel()
	stopped := make(chan struct{})
	go func() { wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook did not stop with its context")
	}
}

// TestTheWebhooksClientHasTheOperatorsRateLimit: the webhook's client (its
// dry runs, one per pod created) takes --kube-api-qps and --kube-api-burst,
// by default no client-side limit, not client-go's default of 5 requests a
// second, behind which a burst of creations ran past the API server's
// timeout (e2e TestABurstOfPodCreationsGetsTheAgentOnTheNode).
func TestTheWebhooksClientHasTheOperatorsRateLimit(t *testing.T) {
	var out bytes.Buffer
	c, err := parseFlags(nil, &out)
	if err != nil {
		t.Fatal(err)
	}
	cfg := webhookClientConfig(&rest.Config{Host: "https://127.0.0.1:1"}, c)
	if cfg.QPS >= 0 {
		t.Errorf("default: QPS %v, want negative (no client-side limit)", cfg.QPS)
	}
	rc, err := rest.RESTClientFor(&rest.Config{Host: cfg.Host, QPS: cfg.QPS, Burst: cfg.Burst,
		ContentConfig: rest.ContentConfig{GroupVersion: &schema.GroupVersion{Version: "v1"}, NegotiatedSerializer: scheme.Codecs}})
	if err != nil {
		t.Fatal(err)
	}
	if rc.GetRateLimiter() != nil {
		t.Errorf("default: the client has a rate limiter %T", rc.GetRateLimiter())
	}
	c, err = parseFlags([]string{"--kube-api-qps=50", "--kube-api-burst=80"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := webhookClientConfig(&rest.Config{}, c); cfg.QPS != 50 || cfg.Burst != 80 {
		t.Errorf("--kube-api-qps=50 --kube-api-burst=80: QPS %v, burst %d", cfg.QPS, cfg.Burst)
	}
}
