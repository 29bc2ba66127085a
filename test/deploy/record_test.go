package deploy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/leader"
	"github.com/handlerkit/handlerkit/pkg/metrics"
	"github.com/handlerkit/handlerkit/pkg/operator"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/webhook"
)

// recorded is one request the operator made, as RBAC sees it, and whether
// the API server refused it.
type recorded struct {
	request
	namespace string
	forbidden bool
}

// recorder notes every API request's RBAC attributes, from every transport
// a rest.Config builds (wrap).
type recorder struct {
	mu   sync.Mutex
	seen []recorded
}

// wrap is a rest.Config's Wrap function: a recording RoundTripper around
// each transport the config builds (the clientsets', the exec stream's).
func (r *recorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if rec, ok := attributes(req); ok {
			rec.forbidden = err == nil && resp.StatusCode == http.StatusForbidden
			r.mu.Lock()
			r.seen = append(r.seen, rec)
			r.mu.Unlock()
		}
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (r *recorder) requests() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// attributes parses a resource request's path and method into RBAC's verb,
// group, resource, subresource and namespace, as the API server does;
// discovery and other non-resource requests give false.
func attributes(req *http.Request) (recorded, bool) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	var rec recorded
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		rec.group, parts = parts[1], parts[3:]
	default:
		return rec, false
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) != 2 {
		rec.namespace, parts = parts[1], parts[2:]
	}
	rec.resource = parts[0]
	named := len(parts) >= 2
	if len(parts) >= 3 {
		rec.subresource = parts[2]
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			rec.verb = "watch"
		case named:
			rec.verb = "get"
		default:
			rec.verb = "list"
		}
	case http.MethodPost:
		rec.verb = "create"
	case http.MethodPut:
		rec.verb = "update"
	case http.MethodPatch:
		rec.verb = "patch"
	case http.MethodDelete:
		rec.verb = "delete"
	default:
		return rec, false
	}
	return rec, true
}

// TestOperatorMakesOnlyTheListedRequests runs the operator in this process,
// as a ServiceAccount bound to deploy/overlays/exec's Roles (deploy/operator's
// and the Exec opt-in's, as both strategies run here), against a real API
// server, and records every request it makes: leader election, the metrics
// Service, the watches, an exporter for each strategy (the test plays the
// kubelet; the strategies' requests are authorized before the missing node
// fails them) and the exporters' deletion through the finalizer. Each
// request must be one of operatorRequests, the list
// TestRBACIsExactlyWhatTheOperatorRequests proves the RBAC against, and none
// may be refused. PodMonitors are not served here, so their requests stay
// listed from the code only.
func TestOperatorMakesOnlyTheListedRequests(t *testing.T) {
	env := cluster.Get(t)
	kube := env.Clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := env.InstallCRDsFromDir(ctx, filepath.Join(repo, "deploy", "crds")); err != nil {
		t.Fatal(err)
	}
	var l layout
	for _, p := range []*string{&l.home, &l.served} {
		ns, err := env.CreateNamespace(ctx, "record")
		if err != nil {
			t.Fatal(err)
		}
		*p = ns
	}
	const sa = "prometheus-jmx-exporter-operator"
	if err := bind(ctx, kube, l, sa, "", roles(t, namespacedExec, "Role")); err != nil {
		t.Fatal(err)
	}
	// The webhook's Role and ClusterRole as shipped, and its configuration,
	// pointed at this test's namespaces.
	hook := webhookOf(t, namespacedExec, build(t, namespacedExec), sa)
	if _, err := kube.RbacV1().Roles(l.home).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: hook.role.Name}, Rules: hook.role.Rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().RoleBindings(l.home).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: hook.role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: hook.role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: l.home}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nsRole := namespacesRoleOf(t, namespacedExec)
	if err := bindClusterRoles(t, ctx, kube, l, sa, "-"+l.home, map[string]rbacv1.Role{hook.clusterRole.Name: hook.clusterRole,
		nsRole.Name: {Rules: nsRole.Rules}}); err != nil {
		t.Fatal(err)
	}
	mwc := hook.config.DeepCopy()
	mwc.Webhooks[0].ClientConfig.Service.Namespace = l.home
	mwc.Webhooks[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] = l.served
	mwcClient := kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if err := mwcClient.Delete(ctx, mwc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if _, err := mwcClient.Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mwcClient.Delete(context.Background(), mwc.Name, metav1.DeleteOptions{}) }()
	if err := waitCaughtUp(ctx, kube, l, "test-sentinel"); err != nil {
		t.Fatal(err)
	}

	// The operator's own pod, owned by a ReplicaSet of a Deployment, as the
	// metrics Service's owner chain needs. No controller runs here: the
	// test writes them.
	dep := deployment(t, "deploy/operator")
	dep.Namespace = ""
	dep, err := kube.AppsV1().Deployments(l.home).Create(ctx, dep, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := kube.AppsV1().ReplicaSets(l.home).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: dep.Name + "-1", Labels: dep.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID, Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Selector: dep.Spec.Selector, Template: dep.Spec.Template},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: dep.Name + "-1-a", Labels: dep.Spec.Template.Labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}},
		Spec: dep.Spec.Template.Spec}
	if _, err := kube.CoreV1().Pods(l.home).Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	saCfg, err := env.ConfigForServiceAccount(ctx, l.home, sa)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	saCfg.Wrap(rec.wrap)
	saCfg.QPS, saCfg.Burst = 100, 200

	log := logrus.New()
	log.SetOutput(io.Discard)
	if testing.Verbose() {
		log.SetOutput(os.Stderr)
	}
	if _, err := metrics.EnsureService(ctx, saCfg, metrics.ServiceOptions{Namespace: l.home, PodName: own.Name, Port: 8383, Logger: log}); err != nil {
		t.Fatalf("metrics Service: %v", err)
	}
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	// The owner of the Lease and the webhook's Secret, as the operator's
	// main finds it (ownDeployment), with the operator's credentials.
	saKube, err := kubernetes.NewForConfig(saCfg)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := leader.DeploymentOwner(ctx, saKube, l.home, own.Name)
	if err != nil || owner == nil || owner.UID != dep.UID {
		t.Fatalf("the operator's Deployment as owner: %+v, %v", owner, err)
	}
	reg := prometheus.NewRegistry()
	elector, err := leader.NewLease(saCfg, sa, leader.WithNamespace(l.home), leader.WithPodName(own.Name),
		leader.WithRegisterer(reg), leader.WithLogger(log), leader.WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	op, err := sdk.New(saCfg, sdk.WithScheme(scheme), sdk.WithRegisterer(reg), sdk.WithMetricsAddr("0"),
		sdk.WithLogger(log), sdk.WithElector(elector), sdk.WithEventSource("prometheus-jmx-exporter-operator"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	helper, jar := filepath.Join(dir, "jmx-attach"), filepath.Join(dir, "agent.jar")
	for _, f := range []string{helper, jar} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r, err := operator.Setup(op, operator.Options{Namespaces: l.served, LocalAttachHelper: helper, LocalAgentJar: jar,
		InjectionTimeout: 20 * time.Second, JVMWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The webhook as every replica runs it (cmd/prometheus-jmx-exporter-operator
	// webhook.go): the certificate manager and the server.
	certs, err := webhook.NewCertManager(saKube, webhook.CertOptions{Namespace: l.home, SecretName: webhookSecret,
		ServiceName: webhookService, WebhookConfigName: webhookConfig, Owner: owner, Logger: log, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := webhook.NewServer(webhook.ServerOptions{Addr: "127.0.0.1:0", GetCertificate: certs.GetCertificate,
		Handlers:   map[string]webhook.Handler{webhookPath: webhook.HandlerFunc(atstart.Handler(r.AtStartInput))},
		Registerer: reg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 3)
	go func() { done <- op.Run(runCtx) }()
	go func() { done <- certs.Run(runCtx) }()
	go func() { done <- srv.Serve(runCtx) }()
	// shutdown stops Run and the webhook and waits for the injection jobs.
	var once sync.Once
	shutdown := func() {
		once.Do(func() {
			stop()
			for range 3 {
				<-done
			}
			r.Wait()
		})
	}
	defer shutdown()

	jmx, err := versioned.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"config.yaml": "rules:\n- pattern: \".*\"\n"}}
	if _, err := kube.CoreV1().ConfigMaps(l.served).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []jmxv1alpha1.InjectionStrategy{jmxv1alpha1.InjectionEphemeralContainer, jmxv1alpha1.InjectionExec} {
		name := strings.ToLower(string(s))
		labels := map[string]string{"app": name}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "jvm-app"}}}}
		if _, err := kube.CoreV1().Pods(l.served).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		playKubelet(t, ctx, kube, l.served, name)
		ex := &jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: jmxv1alpha1.PrometheusJmxExporterSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
				Config:    &jmxv1alpha1.ExporterConfig{ConfigMapName: "cfg", ConfigMapKey: "config.yaml"},
				Injection: jmxv1alpha1.Injection{Strategy: s}}}
		if _, err := jmx.JmxV1alpha1().PrometheusJmxExporters(l.served).Create(ctx, ex, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Until both strategies have made their request and the operator has
	// written the exporters' status.
	made := func(verb, sub string) bool {
		return slices.ContainsFunc(rec.requests(), func(r recorded) bool { return r.verb == verb && r.subresource == sub })
	}
	for !made("patch", "ephemeralcontainers") || !made("create", "exec") || !made("update", "status") {
		select {
		case <-ctx.Done():
			t.Fatalf("the operator did not get to both strategies and the status: %v", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	// The webhook: a serving certificate, the configuration's caBundle set,
	// and a pod's admission answered (the chooser reads as the operator).
	for certs.Ready() != nil || !caBundleSet(ctx, kube, mwc.Name, certs) {
		select {
		case <-ctx.Done():
			t.Fatalf("the webhook's certificates: %v, %v", certs.Ready(), certs.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	admitPod(t, ctx, srv.Addr(), webhookService+"."+l.home+".svc", certs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: l.served, Name: "new", Labels: map[string]string{"app": "exec"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "jvm-app"}}}})

	// The kubelet would run the ephemeral container and report it ended;
	// the job waiting for that ends too.
	playEphemeralEnded(t, ctx, kube, l.served, "ephemeralcontainer")
	// Deleting the exporters: the finalizer runs and lets them go.
	for _, name := range []string{"ephemeralcontainer", "exec"} {
		if err := jmx.JmxV1alpha1().PrometheusJmxExporters(l.served).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for {
			_, err := jmx.JmxV1alpha1().PrometheusJmxExporters(l.served).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("exporter %s was not let go: %v", name, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	// Shut down first, so that its requests (the lease's release, the
	// leader label's removal) are recorded too.
	shutdown()

	// What the operator made at run time in its namespace is owned by its
	// Deployment, so that the garbage collector deletes it on uninstall.
	lease, err := kube.CoordinationV1().Leases(l.home).Get(ctx, sa, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := kube.CoreV1().Secrets(l.home).Get(ctx, webhookSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for what, refs := range map[string][]metav1.OwnerReference{"Lease": lease.OwnerReferences, "webhook Secret": secret.OwnerReferences} {
		if !slices.Equal(refs, []metav1.OwnerReference{*owner}) {
			t.Errorf("%s owners %+v, want the Deployment %s alone", what, refs, dep.Name)
		}
	}

	listed := append(slices.Clone(operatorRequests), namespaceRequests...)
	for _, r := range webhookRequests {
		listed = append(listed, r.request)
	}
	seen := map[request]bool{}
	for _, got := range rec.requests() {
		switch got.namespace {
		case l.served:
			got.scope = served
		case l.home:
			got.scope = home
		case "":
			got.scope = clusterScope
		default:
			t.Errorf("a request outside the operator's namespaces: %s in namespace %q", got.request, got.namespace)
			continue
		}
		if got.forbidden {
			t.Errorf("refused: %s", got.request)
		}
		i := slices.IndexFunc(listed, func(r request) bool {
			return r.scope == got.scope && r.verb == got.verb && r.group == got.group && r.resource == got.resource && r.subresource == got.subresource
		})
		if i < 0 {
			t.Errorf("the operator made %s, which operatorRequests and webhookRequests do not list", got.request)
			continue
		}
		seen[listed[i]] = true
	}
	for _, r := range listed {
		if !seen[r] {
			t.Logf("listed from the code, not made in this run: %s", r)
		}
	}
	// Its list may be streamed over the watch, and update is a rotation's.
	for _, r := range webhookRequests {
		if !seen[r.request] && r.verb != "update" && r.verb != "list" {
			t.Errorf("the webhook's certificate manager did not make %s", r)
		}
	}
	for _, r := range namespaceRequests {
		if !seen[r] {
			t.Errorf("the operator did not make %s", r)
		}
	}
}

// caBundleSet says whether the webhook configuration name carries the
// certificate manager's CA bundle.
func caBundleSet(ctx context.Context, kube kubernetes.Interface, name string, certs *webhook.CertManager) bool {
	c, ok := certs.Certificates()
	if !ok {
		return false
	}
	mwc, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	return err == nil && len(mwc.Webhooks) > 0 && bytes.Equal(mwc.Webhooks[0].ClientConfig.CABundle, c.CABundle)
}

// admitPod sends the webhook server at addr an AdmissionReview of pod's
// creation, as the API server does: to serverName, trusting the certificate
// manager's CA bundle. It fails unless the pod is allowed.
func admitPod(t *testing.T, ctx context.Context, addr, serverName string, certs *webhook.CertManager, pod *corev1.Pod) {
	t.Helper()
	c, _ := certs.Certificates()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(c.CABundle)
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	review, err := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: pod.Namespace,
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}},
	})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: serverName}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+webhookPath, bytes.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got.Response == nil || !got.Response.Allowed {
		t.Fatalf("the webhook answered %d %+v (%v)", resp.StatusCode, got.Response, err)
	}
}

// playKubelet writes a running container's status on pod name, as the
// kubelet would.
func playKubelet(t *testing.T, ctx context.Context, kube kubernetes.Interface, ns, name string) {
	t.Helper()
	p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.5"
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", ContainerID: "containerd://" + name, Ready: true,
		Image: "jvm-app", ImageID: "sha256:1", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	if _, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// playEphemeralEnded reports every ephemeral container of pod name
// terminated, as the kubelet would once jmx-attach exits.
func playEphemeralEnded(t *testing.T, ctx context.Context, kube kubernetes.Interface, ns, name string) {
	t.Helper()
	p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.EphemeralContainers) == 0 {
		t.Fatalf("pod %s has no ephemeral container", name)
	}
	for _, c := range p.Spec.EphemeralContainers {
		p.Status.EphemeralContainerStatuses = append(p.Status.EphemeralContainerStatuses, corev1.ContainerStatus{Name: c.Name,
			Image: c.Image, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}})
	}
	if _, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
