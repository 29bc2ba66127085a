package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/leader"
	"github.com/handlerkit/handlerkit/pkg/operator"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/webhook"
)

// The admission burst of issue 41: burstPods pod creations spread over
// burstWindow, all at once in flight.
const (
	burstPods   = 200
	burstWindow = 10 * time.Second
	// otherExporters share the namespace with the burst's exporter, each
	// selecting pods of its own: a namespace shared by many applications
	// (docs/performance.md measures 1,000 exporters in one namespace).
	otherExporters = 300
)

// TestABurstOfPodCreationsGetsTheAgentInEveryPod runs the operator in this
// process as its ServiceAccount with the shipped RBAC, its webhook (the
// certificate manager, the server, the dry-run Checker, as every replica
// runs them) registered with the real API server by the shipped
// configuration, pointed at the server by URL. An exporter in mode AtStart,
// its change proven (status.proven, so that no canary holds pods back),
// selects the pods of a burst: 200 creations in 10 s, concurrently. Every
// pod the API server admits must carry the agent (the injected annotation
// and JAVA_TOOL_OPTIONS), on a replica that does not lead (which reads the
// exporters from the API server) and on the leader (which reads its
// caches). On the code before issue 41, a replica that does not lead held
// a lock around its list of the exporters, so the burst's admissions
// queued behind each other past the webhook's timeout and pods were created
// without the agent.
func TestABurstOfPodCreationsGetsTheAgentInEveryPod(t *testing.T) {
	for _, leads := range []bool{false, true} {
		name := "not leading"
		if leads {
			name = "leading"
		}
		t.Run(name, func(t *testing.T) { testBurst(t, leads) })
	}
}

func testBurst(t *testing.T, leads bool) {
	env := cluster.Get(t)
	kube := env.Clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := env.InstallCRDsFromDir(ctx, filepath.Join(repo, "deploy", "crds")); err != nil {
		t.Fatal(err)
	}
	var l layout
	for _, p := range []*string{&l.home, &l.served} {
		ns, err := env.CreateNamespace(ctx, "burst")
		if err != nil {
			t.Fatal(err)
		}
		*p = ns
	}
	const sa = "prometheus-jmx-exporter-operator"
	if err := bind(ctx, kube, l, sa, "", roles(t, namespacedInstall, "Role")); err != nil {
		t.Fatal(err)
	}
	// The webhook's Role as shipped, its ClusterRole for this test's own
	// configuration, and the shipped configuration pointed at this
	// process's server and this test's namespace.
	hook := webhookOf(t, namespacedInstall, build(t, namespacedInstall), sa)
	if _, err := kube.RbacV1().Roles(l.home).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: hook.role.Name}, Rules: hook.role.Rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().RoleBindings(l.home).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: hook.role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: hook.role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: l.home}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	configName := "burst-" + l.home
	// And the namespaces' opt-out label, which the webhook's choice reads
	// (rbac-namespaces.yaml as shipped).
	if err := bindClusterRoles(t, ctx, kube, l, sa, "-"+l.home, map[string]rbacv1.Role{hook.clusterRole.Name: {Rules: webhook.ClusterPolicyRules(configName)},
		namespacesRole: {Rules: namespacesRoleOf(t, namespacedInstall).Rules}}); err != nil {
		t.Fatal(err)
	}
	if err := waitCaughtUp(ctx, kube, l, "test-sentinel"); err != nil {
		t.Fatal(err)
	}
	if !leads {
		// Another replica holds the lease for the whole test.
		now := metav1.NewMicroTime(time.Now())
		if _, err := kube.CoordinationV1().Leases(l.home).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: sa},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("another-replica"), LeaseDurationSeconds: ptr.To[int32](3600),
				AcquireTime: &now, RenewTime: &now}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	saCfg, err := env.ConfigForServiceAccount(ctx, l.home, sa)
	if err != nil {
		t.Fatal(err)
	}
	// The operator's default: no client-side limit (--kube-api-qps).
	saCfg.QPS, saCfg.Burst = -1, 0
	log := logrus.New()
	log.SetOutput(io.Discard)
	if testing.Verbose() {
		log.SetOutput(os.Stderr)
	}
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	elector, err := leader.NewLease(saCfg, sa, leader.WithNamespace(l.home), leader.WithRegisterer(reg), leader.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	op, err := sdk.New(saCfg, sdk.WithScheme(scheme), sdk.WithRegisterer(reg), sdk.WithMetricsAddr("0"),
		sdk.WithLogger(log), sdk.WithElector(elector), sdk.WithEventSource(sa))
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
		AtStartDelivery: atstart.DeliveryImageVolume})
	if err != nil {
		t.Fatal(err)
	}
	saKube, err := kubernetes.NewForConfig(saCfg)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := webhook.NewCertManager(saKube, webhook.CertOptions{Namespace: l.home, SecretName: webhookSecret,
		ServiceName: webhookService, ExtraIPs: []net.IP{net.IPv4(127, 0, 0, 1)}, WebhookConfigName: configName, Logger: log, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	checker, err := atstart.NewChecker(atstart.CheckerOptions{Client: saKube, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := webhook.NewServer(webhook.ServerOptions{Addr: "127.0.0.1:0", GetCertificate: certs.GetCertificate,
		Handlers:   map[string]webhook.Handler{webhookPath: webhook.HandlerFunc(atstart.CheckedHandler(r.AtStartInput, checker))},
		Registerer: reg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	mwc := hook.config.DeepCopy()
	mwc.Name = configName
	w := &mwc.Webhooks[0]
	w.ClientConfig.Service, w.ClientConfig.URL = nil, ptr.To("https://"+srv.Addr()+webhookPath)
	w.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] = l.served
	mwcClient := kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := mwcClient.Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mwcClient.Delete(context.Background(), configName, metav1.DeleteOptions{}) }()

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 4)
	go func() { done <- op.Run(runCtx) }()
	go func() { done <- certs.Run(runCtx) }()
	go func() { done <- srv.Serve(runCtx) }()
	go func() { done <- r.RunAdmissionCache(runCtx) }()
	defer func() {
		stop()
		for range 4 {
			<-done
		}
		r.Wait()
	}()

	jmx, err := versioned.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, otherExporters)
	for i := range otherExporters {
		wg.Go(func() {
			other := &jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("other-%03d", i)},
				Spec: jmxv1alpha1.PrometheusJmxExporterSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("other-%03d", i)}},
					Injection: jmxv1alpha1.Injection{Mode: jmxv1alpha1.InjectionModeAtStart}}}
			_, err := jmx.JmxV1alpha1().PrometheusJmxExporters(l.served).Create(ctx, other, metav1.CreateOptions{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"app": "burst"}
	ex := &jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Name: "burst"},
		Spec: jmxv1alpha1.PrometheusJmxExporterSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Injection: jmxv1alpha1.Injection{Mode: jmxv1alpha1.InjectionModeAtStart}}}
	if ex, err = jmx.JmxV1alpha1().PrometheusJmxExporters(l.served).Create(ctx, ex, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The change is proven, as the operator writes it once a JVM ran it for
	// the breaker window (test/e2e markProven), so every pod gets it.
	sum := sha256.Sum256([]byte(jmxv1alpha1.DefaultExporterConfig))
	for {
		cur, err := jmx.JmxV1alpha1().PrometheusJmxExporters(l.served).Get(ctx, ex.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Status.Proven = &jmxv1alpha1.ProvenChange{Generation: cur.Generation, ConfigSHA256: hex.EncodeToString(sum[:]), ProvenAt: metav1.Now()}
		if _, err = jmx.JmxV1alpha1().PrometheusJmxExporters(l.served).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err == nil {
			break
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	// A replica leads while its caches run.
	leading := func() bool {
		_, ok := op.CacheFor(jmxv1alpha1.SchemeGroupVersion.WithKind("PrometheusJmxExporter"), l.served)
		return ok
	}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "jvm-app"}}}}
	}
	// Until the webhook answers (its CA in the configuration) as it will in
	// the burst: a dry run given the agent, as no canary (the replica sees
	// the change proven; a leader, in its cache).
	for {
		got, err := kube.CoreV1().Pods(l.served).Create(ctx, pod("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		if rec, ok, _ := atstart.ParseRecord(got); ok && !rec.Canary && leading() == leads {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the webhook never gave a pod the agent (leading %v): certificates %v, %v; notes %q", leading(), certs.Ready(), certs.Err(), got.Annotations[atstart.AnnotationNotes])
		case <-time.After(200 * time.Millisecond):
		}
	}

	if leads {
		// The leader has looked at every exporter (its status written), so
		// that the burst meets a leader at work on pods, not one still
		// busy with 300 exporters it has just been given.
		for {
			list, err := jmx.JmxV1alpha1().PrometheusJmxExporters(l.served).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			looked := 0
			for _, e := range list.Items {
				if e.Status.ObservedGeneration == e.Generation {
					looked++
				}
			}
			if looked == len(list.Items) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the leader looked at %d of %d exporters", looked, len(list.Items))
			case <-time.After(500 * time.Millisecond):
			}
		}
	}

	// The burst: pod i is created at i*burstWindow/burstPods, each in its
	// own goroutine, so that creations overlap as their admissions take.
	var (
		mu      sync.Mutex
		without []string
		notes   = map[string]string{}
	)
	start := time.Now()
	for i := range burstPods {
		wg.Go(func() {
			time.Sleep(time.Until(start.Add(time.Duration(i) * burstWindow / burstPods)))
			name := fmt.Sprintf("burst-%03d", i)
			got, err := kube.CoreV1().Pods(l.served).Create(ctx, pod(name), metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				without = append(without, name)
				notes[name] = "not created: " + err.Error()
				return
			}
			rec, ok, err := atstart.ParseRecord(got)
			env := ""
			for _, e := range got.Spec.Containers[0].Env {
				if e.Name == "JAVA_TOOL_OPTIONS" {
					env = e.Value
				}
			}
			if !ok || err != nil || rec.Exporter != ex.Name || !strings.Contains(env, "-javaagent:") {
				without = append(without, name)
				notes[name] = fmt.Sprintf("record %v (%v), JAVA_TOOL_OPTIONS %q, notes %q", ok, err, env, got.Annotations[atstart.AnnotationNotes])
			}
		})
	}
	wg.Wait()
	t.Logf("%d pods created in %s; the webhook's answers (the dry runs' nested ones too): %s", burstPods,
		time.Since(start).Round(time.Millisecond), answerTimes(t, reg))
	if len(without) > 0 {
		sort.Strings(without)
		for _, name := range without[:min(len(without), 5)] {
			t.Logf("%s: %s", name, notes[name])
		}
		t.Errorf("%d of %d pods of the burst were created without the agent: %v", len(without), burstPods, without)
	}
}

// answerTimes describes the webhook's histogram of answer times in reg, as
// how many answers took longer than each bucket's bound.
func answerTimes(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "handlerkit_webhook_request_duration_seconds" {
			continue
		}
		var parts []string
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			parts = append(parts, fmt.Sprintf("%d answers", h.GetSampleCount()))
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() >= 0.5 {
					parts = append(parts, fmt.Sprintf("%d over %gs", h.GetSampleCount()-b.GetCumulativeCount(), b.GetUpperBound()))
				}
			}
		}
		return strings.Join(parts, ", ")
	}
	return "no histogram"
}
