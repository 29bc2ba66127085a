package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/handlerkit/handlerkit/pkg/webhook"
)

// The admission webhook's names: the operator's flag defaults
// (TestOperatorDefaultsAreTheDefaultInstalls reads them from -help), which
// the manifests use.
const (
	webhookService  = "prometheus-jmx-exporter-operator-webhook"
	webhookSecret   = "prometheus-jmx-exporter-operator-webhook-tls"
	webhookConfig   = "prometheus-jmx-exporter-operator"
	webhookName     = "pods.jmx.handlerkit.dev"
	webhookPath     = "/mutate-pods"
	webhookRoleName = "prometheus-jmx-exporter-operator-webhook"
	// optOutLabel on a pod or a namespace keeps its pods from the webhook.
	optOutLabel = "jmx.handlerkit.dev/inject"
	// operatorPodLabel is the label of the operator's own pods.
	operatorPodLabel = "app.kubernetes.io/name"
	// webhookServerLabel is the label that only the operator's pod
	// template carries, which the webhook Service selects.
	webhookServerLabel = "jmx.handlerkit.dev/webhook-server"
)

// clusterScope is where the operator makes requests on cluster-scoped
// objects.
const clusterScope scope = "cluster"

const (
	admissionGroup = "admissionregistration.k8s.io"
	mwcs           = "mutatingwebhookconfigurations"
)

// namedRequest is a request on one object by name, as RBAC's resourceNames
// see it ("" for create, whose name the authorizer is not told).
type namedRequest struct {
	request
	name string
}

func (r namedRequest) String() string {
	if r.name == "" {
		return r.request.String()
	}
	return r.request.String() + " named " + r.name
}

// webhookRequests are the requests of the webhook's certificate manager
// (pkg/webhook CertManager), which every replica runs with --webhook=on:
// the Secret in the operator's own namespace and the webhook configuration's
// caBundle. Its list and watch carry the field selector metadata.name, so
// the authorizer sees the name. TestOperatorMakesOnlyTheListedRequests
// records them.
var webhookRequests = []namedRequest{
	{request{home, "get", "", "secrets", "", "pkg/webhook CertManager: the Secret"}, webhookSecret},
	{request{home, "list", "", "secrets", "", "pkg/webhook CertManager: the Secret's watch (metadata.name)"}, webhookSecret},
	{request{home, "watch", "", "secrets", "", "pkg/webhook CertManager: the Secret's watch (metadata.name)"}, webhookSecret},
	{request{home, "update", "", "secrets", "", "pkg/webhook CertManager: a rotation step"}, webhookSecret},
	{request{home, "create", "", "secrets", "", "pkg/webhook CertManager: the first replica's Secret"}, ""},
	{request{clusterScope, "get", admissionGroup, mwcs, "", "pkg/webhook CertManager: the caBundle"}, webhookConfig},
	{request{clusterScope, "list", admissionGroup, mwcs, "", "pkg/webhook CertManager: the configuration's watch (metadata.name)"}, webhookConfig},
	{request{clusterScope, "watch", admissionGroup, mwcs, "", "pkg/webhook CertManager: the configuration's watch (metadata.name)"}, webhookConfig},
	{request{clusterScope, "patch", admissionGroup, mwcs, "", "pkg/webhook CertManager: the caBundle"}, webhookConfig},
}

// allowedNamed is allowed for a request on a named object (ns "" for a
// cluster-scoped one).
func allowedNamed(ctx context.Context, kube kubernetes.Interface, user, ns string, r namedRequest) (bool, error) {
	groups := []string{"system:authenticated"}
	if parts := strings.Split(user, ":"); len(parts) == 4 && parts[1] == "serviceaccount" {
		groups = append(groups, "system:serviceaccounts", "system:serviceaccounts:"+parts[2])
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: r.verb, Group: r.group,
			Resource: r.resource, Subresource: r.subresource, Name: r.name},
	}}
	got, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return got.Status.Allowed, nil
}

// isWebhookRole says whether a Role or ClusterRole is the webhook's, which
// names its objects (resourceNames) and is proven apart from the others.
func isWebhookRole(name string) bool {
	return name == webhookRoleName || strings.HasSuffix(name, "-webhook")
}

// webhookParts are an install's webhook objects.
type webhookParts struct {
	role, clusterRole rbacv1.Role // the ClusterRole's rules in a Role
	roleBinding       rbacv1.RoleBinding
	clusterBinding    rbacv1.ClusterRoleBinding
	service           corev1.Service
	config            admissionregistrationv1.MutatingWebhookConfiguration
}

// webhookOf returns the webhook objects of objs, failing on any missing.
func webhookOf(t testing.TB, what string, objs []*unstructured.Unstructured, fullname string) webhookParts {
	t.Helper()
	var p webhookParts
	found := map[string]bool{}
	into := func(o *unstructured.Unstructured, v any) {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, v); err != nil {
			t.Fatal(err)
		}
		found[o.GetKind()] = true
	}
	for _, o := range objs {
		switch {
		case o.GetKind() == "Role" && o.GetName() == fullname+"-webhook":
			into(o, &p.role)
		case o.GetKind() == "ClusterRole" && o.GetName() == fullname+"-webhook":
			into(o, &p.clusterRole)
		case o.GetKind() == "RoleBinding" && o.GetName() == fullname+"-webhook":
			into(o, &p.roleBinding)
		case o.GetKind() == "ClusterRoleBinding" && o.GetName() == fullname+"-webhook":
			into(o, &p.clusterBinding)
		case o.GetKind() == "Service" && o.GetName() == fullname+"-webhook":
			into(o, &p.service)
		case o.GetKind() == "MutatingWebhookConfiguration":
			into(o, &p.config)
		}
	}
	for _, k := range []string{"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "Service", "MutatingWebhookConfiguration"} {
		if !found[k] {
			t.Errorf("%s: no webhook %s", what, k)
		}
	}
	return p
}

// TestWebhookRBACIsTheWebhookPackagesRules: in every install, the webhook's
// Role is exactly webhook.PolicyRules and its ClusterRole exactly
// webhook.ClusterPolicyRules for the names the operator uses (no more, no
// less; pkg/webhook's tests run the certificate manager under these rules
// alone), bound to the operator's ServiceAccount, the Role in the operator's
// own namespace.
func TestWebhookRBACIsTheWebhookPackagesRules(t *testing.T) {
	for _, dir := range operatorInstalls {
		p := webhookOf(t, dir, build(t, dir), "prometheus-jmx-exporter-operator")
		if want := webhook.PolicyRules(webhookSecret, false); !reflect.DeepEqual(p.role.Rules, want) {
			t.Errorf("%s: the webhook Role's rules\n%v\nwant webhook.PolicyRules\n%v", dir, p.role.Rules, want)
		}
		if want := webhook.ClusterPolicyRules(webhookConfig); !reflect.DeepEqual(p.clusterRole.Rules, want) {
			t.Errorf("%s: the webhook ClusterRole's rules\n%v\nwant webhook.ClusterPolicyRules\n%v", dir, p.clusterRole.Rules, want)
		}
		home := deployment(t, dir).Namespace
		sa := rbacv1.Subject{Kind: "ServiceAccount", Name: "prometheus-jmx-exporter-operator", Namespace: home}
		if p.role.Namespace != home || p.roleBinding.Namespace != home || !reflect.DeepEqual(p.roleBinding.Subjects, []rbacv1.Subject{sa}) ||
			p.roleBinding.RoleRef.Name != p.role.Name || p.roleBinding.RoleRef.Kind != "Role" {
			t.Errorf("%s: Role in %q, bound in %q to %+v by %+v; want both in the operator's namespace %q, bound to its ServiceAccount",
				dir, p.role.Namespace, p.roleBinding.Namespace, p.roleBinding.Subjects, p.roleBinding.RoleRef, home)
		}
		if !reflect.DeepEqual(p.clusterBinding.Subjects, []rbacv1.Subject{sa}) || p.clusterBinding.RoleRef.Name != p.clusterRole.Name ||
			p.clusterBinding.RoleRef.Kind != "ClusterRole" {
			t.Errorf("%s: ClusterRoleBinding %+v to %+v", dir, p.clusterBinding.Subjects, p.clusterBinding.RoleRef)
		}
	}
}

// TestWebhookConfigurationIsFailOpenAndSelective checks the webhook
// configuration and Service of every install: one webhook for the creation of
// pods, failurePolicy Ignore (a pod is created without the agent rather than
// not at all), no side effects, a timeout of 5 s, reinvocation Never,
// AdmissionReview v1, the operator's Service and path, an empty caBundle
// (the operator fills it in); it never sees the system namespaces, a pod or
// namespace labelled jmx.handlerkit.dev/inject=false, or the operator's own
// pods; the namespaced install sees only the namespace it serves. The
// Service sends port 443 to every replica's port webhook, the operator's
// --webhook-addr; the cluster-wide install's webhook objects are the
// namespaced one's but for the namespaces selected.
func TestWebhookConfigurationIsFailOpenAndSelective(t *testing.T) {
	byDir := map[string]webhookParts{}
	for _, dir := range operatorInstalls {
		d := deployment(t, dir)
		home := d.Namespace
		p := webhookOf(t, dir, build(t, dir), "prometheus-jmx-exporter-operator")
		byDir[dir] = p
		if p.config.Name != webhookConfig || len(p.config.Webhooks) != 1 {
			t.Fatalf("%s: configuration %s with %d webhooks, want %s with one", dir, p.config.Name, len(p.config.Webhooks), webhookConfig)
		}
		w := p.config.Webhooks[0]
		if w.Name != webhookName || !slices.Equal(w.AdmissionReviewVersions, []string{"v1"}) ||
			w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone ||
			w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore ||
			w.TimeoutSeconds == nil || *w.TimeoutSeconds != 5 ||
			w.ReinvocationPolicy == nil || *w.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy {
			t.Errorf("%s: webhook %s, versions %v, side effects %v, failure policy %v, timeout %v, reinvocation %v", dir, w.Name,
				w.AdmissionReviewVersions, deref(w.SideEffects), deref(w.FailurePolicy), deref(w.TimeoutSeconds), deref(w.ReinvocationPolicy))
		}
		namespaced := admissionregistrationv1.NamespacedScope
		wantRules := []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: &namespaced}}}
		if !reflect.DeepEqual(w.Rules, wantRules) {
			t.Errorf("%s: rules %+v, want the creation of pods only", dir, w.Rules)
		}
		svc := w.ClientConfig.Service
		if svc == nil || svc.Name != webhookService || svc.Namespace != home || svc.Path == nil || *svc.Path != webhookPath || svc.Port == nil || *svc.Port != 443 ||
			w.ClientConfig.URL != nil || len(w.ClientConfig.CABundle) != 0 {
			t.Errorf("%s: clientConfig %+v (service %+v), want Service %s/%s port 443 path %s and no caBundle", dir, w.ClientConfig, svc, home, webhookService, webhookPath)
		}
		checkWebhookSelectors(t, dir, w, d.Spec.Template.Labels, home, dir == clusterWideInstall || dir == clusterWideExec)

		if p.service.Namespace != home || len(p.service.Spec.Ports) != 1 || p.service.Spec.Ports[0].Port != 443 || p.service.Spec.Ports[0].TargetPort.String() != "webhook" {
			t.Errorf("%s: Service %s/%s ports %+v, want port 443 to port webhook of the operator's pods", dir,
				p.service.Namespace, p.service.Name, p.service.Spec.Ports)
		}
		checkWebhookServiceSelector(t, dir, build(t, dir), p.service, d)
		_, port, _ := net.SplitHostPort(webhook.DefaultAddr)
		c := d.Spec.Template.Spec.Containers[0]
		if i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "webhook" }); i < 0 || fmt.Sprint(c.Ports[i].ContainerPort) != port {
			t.Errorf("%s: container ports %+v, want webhook at %s (--webhook-addr)", dir, c.Ports, port)
		}
		if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--webhook") }) {
			t.Errorf("%s: args %v: the manifests run the operator's webhook defaults", dir, c.Args)
		}
	}
	for ns, cw := range map[string]string{namespacedInstall: clusterWideInstall, namespacedExec: clusterWideExec} {
		a, b := byDir[ns], byDir[cw]
		a.config.Webhooks[0].NamespaceSelector, b.config.Webhooks[0].NamespaceSelector = nil, nil
		for _, p := range []*webhookParts{&a, &b} {
			p.role.Namespace, p.roleBinding.Namespace = "", ""
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s's webhook objects differ from %s's in more than the namespaces selected:\n%+v\n%+v", cw, ns, b, a)
		}
	}
}

// checkWebhookServiceSelector: the webhook Service selects the operator's
// Deployment's selector labels and webhookServerLabel, which its pod
// template carries and no other object of the install names (the
// Deployment's selector, immutable, is without it: an upgrade keeps the
// Deployment and rolls its pods).
func checkWebhookServiceSelector(t *testing.T, what string, objs []*unstructured.Unstructured, svc corev1.Service, d *appsv1.Deployment) {
	t.Helper()
	want := map[string]string{webhookServerLabel: "true"}
	for k, v := range d.Spec.Selector.MatchLabels {
		want[k] = v
	}
	if !reflect.DeepEqual(svc.Spec.Selector, want) {
		t.Errorf("%s: webhook Service selector %v, want the Deployment's selector labels and %s=true: %v", what, svc.Spec.Selector, webhookServerLabel, want)
	}
	if d.Spec.Template.Labels[webhookServerLabel] != "true" {
		t.Errorf("%s: the operator's pods are labelled %v, without %s=true", what, d.Spec.Template.Labels, webhookServerLabel)
	}
	if _, ok := d.Spec.Selector.MatchLabels[webhookServerLabel]; ok {
		t.Errorf("%s: the Deployment's selector %v names %s: a selector is immutable, an upgrade could not apply it", what, d.Spec.Selector.MatchLabels, webhookServerLabel)
	}
	for _, o := range objs {
		if o.GetKind() == "Deployment" || o.GetKind() == "Service" && o.GetName() == svc.Name {
			continue
		}
		raw, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), webhookServerLabel) {
			t.Errorf("%s: %s %s names %s: only the operator's pods may carry it", what, o.GetKind(), o.GetName(), webhookServerLabel)
		}
	}
}

// checkWebhookSelectors evaluates a webhook's selectors as the apiserver
// does: which namespaces and which pods it is called for.
func checkWebhookSelectors(t *testing.T, what string, w admissionregistrationv1.MutatingWebhook, operatorPod map[string]string, home string, clusterWide bool) {
	t.Helper()
	nsSel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
	if err != nil || w.NamespaceSelector == nil {
		t.Fatalf("%s: namespaceSelector %+v: %v", what, w.NamespaceSelector, err)
	}
	objSel, err := metav1.LabelSelectorAsSelector(w.ObjectSelector)
	if err != nil || w.ObjectSelector == nil {
		t.Fatalf("%s: objectSelector %+v: %v", what, w.ObjectSelector, err)
	}
	ns := func(name string, more ...string) labels.Set {
		l := labels.Set{"kubernetes.io/metadata.name": name}
		for i := 0; i+1 < len(more); i += 2 {
			l[more[i]] = more[i+1]
		}
		return l
	}
	want := map[string]bool{"kube-system": false, "kube-public": false, "kube-node-lease": false, "shop": clusterWide, home: !clusterWide}
	for name, called := range want {
		if got := nsSel.Matches(ns(name)); got != called {
			t.Errorf("%s: called for pods of namespace %s: %v, want %v", what, name, got, called)
		}
	}
	served := home
	if clusterWide {
		served = "shop"
	}
	if nsSel.Matches(ns(served, optOutLabel, "false")) {
		t.Errorf("%s: called for a namespace labelled %s=false", what, optOutLabel)
	}
	if !nsSel.Matches(ns(served, optOutLabel, "true")) {
		t.Errorf("%s: not called for a namespace labelled %s=true", what, optOutLabel)
	}
	for pod, called := range map[string]bool{"app=orders": true, "app=orders," + optOutLabel + "=false": false, "": true} {
		l, _ := labels.ConvertSelectorToLabelsMap(pod)
		if got := objSel.Matches(l); got != called {
			t.Errorf("%s: called for a pod labelled {%s}: %v, want %v", what, pod, got, called)
		}
	}
	if objSel.Matches(labels.Set(operatorPod)) {
		t.Errorf("%s: called for the operator's own pods (%v)", what, operatorPod)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestWebhookRBACAllowsExactlyTheCertManagersRequests binds the webhook's
// Role and ClusterRole as deploy/operator ships them and asks the API
// server's authorizer: the certificate manager's every request is allowed;
// for every verb of every rule, removing it denies a request it makes; and
// the operator reads no other Secret, lists no Secrets but its own (by
// name), has no Secret at all in the namespaces it serves, and may change no
// other webhook configuration.
func TestWebhookRBACAllowsExactlyTheCertManagersRequests(t *testing.T) {
	env := cluster.Get(t)
	kube := env.Clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var l layout
	for _, p := range []*string{&l.home, &l.served} {
		ns, err := env.CreateNamespace(ctx, "hookrbac")
		if err != nil {
			t.Fatal(err)
		}
		*p = ns
	}
	p := webhookOf(t, namespacedInstall, build(t, namespacedInstall), "prometheus-jmx-exporter-operator")

	type grant struct {
		cluster  bool
		rule     int
		resource string
		verb     string
	}
	without := func(rules []rbacv1.PolicyRule, rule int, verb string) []rbacv1.PolicyRule {
		rules = slices.Clone(rules)
		r := *rules[rule].DeepCopy()
		r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { return v == verb })
		if len(r.Verbs) == 0 {
			return slices.Delete(rules, rule, rule+1)
		}
		rules[rule] = r
		return rules
	}
	bindAs := func(sa string, role, clusterRole []rbacv1.PolicyRule) {
		t.Helper()
		subject := rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: l.home}
		if len(role) > 0 {
			r, err := kube.RbacV1().Roles(l.home).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: role}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kube.RbacV1().RoleBindings(l.home).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name}, Subjects: []rbacv1.Subject{subject}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if len(clusterRole) > 0 {
			cr, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{GenerateName: "hookrbac-"}, Rules: clusterRole}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			crb, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: "hookrbac-"},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}, Subjects: []rbacv1.Subject{subject}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
				_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), cr.Name, metav1.DeleteOptions{})
			})
		}
	}
	bindAs("operator", p.role.Rules, p.clusterRole.Rules)
	var grants []grant
	for _, g := range []struct {
		cluster bool
		rules   []rbacv1.PolicyRule
	}{{false, p.role.Rules}, {true, p.clusterRole.Rules}} {
		for i, rule := range g.rules {
			for _, verb := range rule.Verbs {
				sa := fmt.Sprintf("without-%d", len(grants))
				if g.cluster {
					bindAs(sa, p.role.Rules, without(p.clusterRole.Rules, i, verb))
				} else {
					bindAs(sa, without(p.role.Rules, i, verb), p.clusterRole.Rules)
				}
				grants = append(grants, grant{g.cluster, i, rule.Resources[0], verb})
			}
		}
	}
	nsOf := func(r namedRequest) string {
		if r.scope == clusterScope {
			return ""
		}
		return l.ns(r.scope)
	}
	// The bindings are in force once every user is allowed the requests it
	// keeps (the authorizer's caches catch up in the background).
	users := []string{"operator"}
	for i := range grants {
		users = append(users, fmt.Sprintf("without-%d", i))
	}
	for i, sa := range users {
		for _, r := range webhookRequests {
			if i > 0 && r.verb == grants[i-1].verb && r.resource == grants[i-1].resource {
				continue
			}
			for {
				ok, err := allowedNamed(ctx, kube, l.user(sa), nsOf(r), r)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("%s is never allowed %s: %v", sa, r, ctx.Err())
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}
	for i, g := range grants {
		n := 0
		for _, r := range webhookRequests {
			if r.verb != g.verb || r.resource != g.resource {
				continue
			}
			n++
			if ok, err := allowedNamed(ctx, kube, l.user(fmt.Sprintf("without-%d", i)), nsOf(r), r); err != nil || ok {
				t.Errorf("without %s %s (rule %d), still allowed: %s (%v)", g.verb, g.resource, g.rule, r, err)
			}
		}
		if n == 0 {
			t.Errorf("%s %s (rule %d): the certificate manager makes no request that needs it", g.verb, g.resource, g.rule)
		}
	}
	for _, r := range []namedRequest{
		{request{home, "get", "", "secrets", "", ""}, "another-secret"},
		{request{home, "list", "", "secrets", "", ""}, ""},
		{request{home, "watch", "", "secrets", "", ""}, ""},
		{request{home, "delete", "", "secrets", "", ""}, webhookSecret},
		{request{home, "patch", "", "secrets", "", ""}, webhookSecret},
		{request{served, "get", "", "secrets", "", ""}, webhookSecret},
		{request{served, "create", "", "secrets", "", ""}, ""},
		{request{clusterScope, "patch", admissionGroup, mwcs, "", ""}, "another-webhook"},
		{request{clusterScope, "delete", admissionGroup, mwcs, "", ""}, webhookConfig},
		{request{clusterScope, "update", admissionGroup, mwcs, "", ""}, webhookConfig},
		{request{clusterScope, "create", admissionGroup, mwcs, "", ""}, ""},
		{request{clusterScope, "list", admissionGroup, mwcs, "", ""}, ""},
		{request{clusterScope, "patch", admissionGroup, "validatingwebhookconfigurations", "", ""}, webhookConfig},
	} {
		if ok, err := allowedNamed(ctx, kube, l.user("operator"), nsOf(r), r); err != nil || ok {
			t.Errorf("allowed %s (%v)", r, err)
		}
	}
}
