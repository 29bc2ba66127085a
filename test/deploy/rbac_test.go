package deploy

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

// scope says in which namespace the operator makes a request: one it serves,
// or its own (home) namespace, where it runs.
type scope string

const (
	served scope = "served"
	home   scope = "home"
)

// request is one kind of API request the operator makes.
type request struct {
	scope                 scope
	verb, group, resource string
	subresource, madeBy   string
}

func (r request) String() string {
	res := r.fullResource()
	if r.group != "" {
		res = r.group + " " + res
	}
	return fmt.Sprintf("%s %s in the %s namespace (%s)", r.verb, res, r.scope, r.madeBy)
}

const (
	jmxGroup  = "jmx.handlerkit.dev"
	monGroup  = "monitoring.coreos.com"
	exporters = "prometheusjmxexporters"
)

// operatorRequests are the requests the operator makes, read from its code
// (each names the code that makes it): in every namespace it serves, and in
// its own. Informers list and watch (client-go streams the initial list over
// the watch where the server can, and lists where it cannot); query and
// action read past the cache (get) while it is not synced for the namespace.
// TestOperatorMakesOnlyTheListedRequests records a run of the operator and
// checks that every request it made is listed here.
var operatorRequests = []request{
	{served, "list", jmxGroup, exporters, "", "pkg/operator Setup: the exporters watch; RunAdmissionCache: the webhook's exporters cache"},
	{served, "watch", jmxGroup, exporters, "", "pkg/operator Setup: the exporters watch; RunAdmissionCache: the webhook's exporters cache"},
	{served, "get", jmxGroup, exporters, "", "pkg/operator job.go exporterRef: query.Get, live before the cache syncs"},
	{served, "patch", jmxGroup, exporters, "", "pkg/operator reconcile.go: action.AddFinalizer/RemoveFinalizer"},
	{served, "update", jmxGroup, exporters, "status", "pkg/operator reconcile.go: action.UpdateStatus"},
	{served, "update", jmxGroup, exporters, "finalizers", "pkg/operator podmonitor.go: a PodMonitor owned with blockOwnerDeletion (admission checks it)"},
	{served, "list", "", "pods", "", "pkg/operator Setup: the pods watch; pkg/inject ephemeral.go: the pod's watch"},
	{served, "watch", "", "pods", "", "pkg/operator Setup: the pods watch; pkg/inject ephemeral.go: the pod's watch"},
	{served, "get", "", "pods", "", "pkg/operator record.go, pkg/inject ephemeral.go: the live pod before a write"},
	{served, "patch", "", "pods", "", "pkg/operator record.go: the agents and prometheus.io annotations"},
	{served, "get", "", "pods", "log", "pkg/operator agentline.go: the agent's line in the log of a container given the agent at start"},
	ephemeralRequest,
	execRequest,
	evictionRequest,
	{served, "create", "", "pods", "", "pkg/inject/atstart dryrun.go: the webhook's dry run of a patched pod (dryRun All)"},
	{served, "list", "", "limitranges", "", "pkg/inject/atstart dryrun.go: the LimitRanges that size the init container"},
	{served, "list", "", "configmaps", "", "pkg/operator Setup: the ConfigMaps watch"},
	{served, "watch", "", "configmaps", "", "pkg/operator Setup: the ConfigMaps watch"},
	{served, "get", "", "configmaps", "", "pkg/operator reconcile.go: the exporter's config, query.Get live before the cache syncs"},
	{served, "create", "", "events", "", "pkg/sdk events.go: an Event"},
	{served, "patch", "", "events", "", "pkg/sdk events.go: a repeated Event"},
	{served, "list", monGroup, "podmonitors", "", "pkg/operator Setup: the PodMonitors watch"},
	{served, "watch", monGroup, "podmonitors", "", "pkg/operator Setup: the PodMonitors watch"},
	{served, "get", monGroup, "podmonitors", "", "pkg/operator podmonitor.go: action.CreateOrUpdate, live before the cache syncs"},
	{served, "create", monGroup, "podmonitors", "", "pkg/operator podmonitor.go: action.CreateOrUpdate"},
	{served, "update", monGroup, "podmonitors", "", "pkg/operator podmonitor.go: action.CreateOrUpdate"},
	{home, "get", "coordination.k8s.io", "leases", "", "pkg/leader lease.go: the lock"},
	{home, "create", "coordination.k8s.io", "leases", "", "pkg/leader lease.go: the lock"},
	{home, "update", "coordination.k8s.io", "leases", "", "pkg/leader lease.go: renewing and releasing the lock"},
	{home, "get", "", "services", "", "pkg/metrics service.go EnsureService"},
	{home, "create", "", "services", "", "pkg/metrics service.go EnsureService"},
	{home, "update", "", "services", "", "pkg/metrics service.go EnsureService"},
	{home, "get", monGroup, "servicemonitors", "", "pkg/metrics service.go ensureServiceMonitor"},
	{home, "create", monGroup, "servicemonitors", "", "pkg/metrics service.go ensureServiceMonitor"},
	{home, "update", monGroup, "servicemonitors", "", "pkg/metrics service.go ensureServiceMonitor"},
	{home, "get", "apps", "replicasets", "", "pkg/metrics service.go, pkg/leader owner.go DeploymentOwner: the own pod's ReplicaSet, whose controller reference names the Deployment that owns the metrics Service, the Lease and the webhook's Secret"},
	{home, "get", "", "pods", "", "pkg/leader labeler.go and owner.go, pkg/metrics service.go: the own pod"},
	{home, "list", "", "pods", "", "pkg/leader labeler.go: the namespace's pods informer"},
	{home, "watch", "", "pods", "", "pkg/leader labeler.go: the namespace's pods informer"},
	{home, "patch", "", "pods", "", "pkg/leader labeler.go: the leader label"},
}

// ephemeralRequest is the EphemeralContainer strategy's request.
var ephemeralRequest = request{served, "patch", "", "pods", "ephemeralcontainers", "pkg/inject ephemeral.go: the EphemeralContainer strategy"}

// evictionRequest is spec.injection.restartOnRefusal's: a pod whose JVM
// refuses the attach is evicted (policy/v1, so PodDisruptionBudgets apply)
// so that it is created again with the agent at start.
var evictionRequest = request{served, "create", "", "pods", "eviction", "pkg/operator evict.go: restartOnRefusal evicts a pod that refuses the attach"}

// execRequest is the Exec strategy's request, which only the Exec opt-in
// (deploy/overlays/exec, the chart's strategies.exec) grants.
var execRequest = request{served, "create", "", "pods", "exec", "pkg/inject exec.go: the Exec strategy"}

// defaultRequests are operatorRequests less execRequest: what the operator
// makes with the default strategies (EphemeralContainer only).
func defaultRequests() []request {
	return slices.DeleteFunc(slices.Clone(operatorRequests), func(r request) bool { return r == execRequest })
}

// The installs: the default ones (EphemeralContainer only) and the Exec
// opt-in overlays on top of them.
const (
	namespacedInstall  = "deploy/operator"
	clusterWideInstall = "deploy/operator/cluster-wide"
	namespacedExec     = "deploy/overlays/exec"
	clusterWideExec    = "deploy/overlays/cluster-wide-exec"
)

// roleScopes maps the Roles of deploy/overlays/exec (deploy/operator's and
// the -exec Role) to where they are bound.
var roleScopes = map[string]scope{
	"prometheus-jmx-exporter-operator":                    served,
	"prometheus-jmx-exporter-operator-ephemeralcontainer": served,
	"prometheus-jmx-exporter-operator-exec":               served,
	"prometheus-jmx-exporter-operator-eviction":           served,
	"prometheus-jmx-exporter-operator-atstart":            served,
	"prometheus-jmx-exporter-operator-home":               home,
}

// roles returns the operator's Roles (or ClusterRoles) of a kustomization,
// by name: all but the users' aggregated ClusterRoles (userRoles), the
// webhook's, which names its objects and is proven by webhook_test.go, and
// the namespaces' (namespaces_test.go).
func roles(t testing.TB, dir, kind string) map[string]rbacv1.Role {
	t.Helper()
	out := map[string]rbacv1.Role{}
	for _, o := range build(t, dir) {
		if o.GetKind() != kind || aggregated(o.GetLabels()) || isWebhookRole(o.GetName()) || o.GetName() == namespacesRole {
			continue
		}
		var r rbacv1.Role
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
			t.Fatal(err)
		}
		out[r.Name] = r
	}
	return out
}

// aggregateLabel is the prefix of the labels that aggregate a ClusterRole
// into a built-in one (view, edit, admin).
const aggregateLabel = "rbac.authorization.k8s.io/aggregate-to-"

// aggregated says whether labels aggregate a ClusterRole into a built-in one.
func aggregated(labels map[string]string) bool {
	for k, v := range labels {
		if strings.HasPrefix(k, aggregateLabel) && v == "true" {
			return true
		}
	}
	return false
}

// fullResource is the resource as RBAC rules name it: pods/exec.
func (r request) fullResource() string {
	if r.subresource == "" {
		return r.resource
	}
	return r.resource + "/" + r.subresource
}

// layout is where one ServiceAccount's Roles are bound: its home namespace
// and a namespace it serves (another one, so that the home Role is proven on
// its own).
type layout struct {
	home, served string
}

func (l layout) ns(s scope) string {
	if s == home {
		return l.home
	}
	return l.served
}

// user is the ServiceAccount's user name; subjectAccessReviews need no
// ServiceAccount object.
func (l layout) user(sa string) string { return "system:serviceaccount:" + l.home + ":" + sa }

// bind creates the roles, renamed with suffix, in their scope's namespace,
// each bound to ServiceAccount sa of the home namespace.
func bind(ctx context.Context, kube kubernetes.Interface, l layout, sa, suffix string, rs map[string]rbacv1.Role) error {
	for name, r := range rs {
		ns := l.ns(roleScopes[name])
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name + suffix}, Rules: r.Rules}
		if _, err := kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			return err
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + suffix},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name + suffix},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: l.home}}}
		if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// allowed asks the API server's authorizer whether user may make r in ns.
func allowed(ctx context.Context, kube kubernetes.Interface, user, ns string, r request) (bool, error) {
	groups := []string{"system:authenticated"}
	if parts := strings.Split(user, ":"); len(parts) == 4 && parts[1] == "serviceaccount" {
		groups = append(groups, "system:serviceaccounts", "system:serviceaccounts:"+parts[2])
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: r.verb, Group: r.group,
			Resource: r.resource, Subresource: r.subresource},
	}}
	got, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return got.Status.Allowed, nil
}

// waitCaughtUp waits until the API server's authorizer has seen every Role
// and RoleBinding created so far: it creates one more pair (last, so its
// watch events come after theirs) that lets user get "sentinels", and polls
// until it is allowed. The Roles never change after, so what the authorizer
// answers next is final.
func waitCaughtUp(ctx context.Context, kube kubernetes.Interface, l layout, user string) error {
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "sentinel"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"test.handlerkit.dev"}, Resources: []string{"sentinels"}, Verbs: []string{"get"}}}}
	if _, err := kube.RbacV1().Roles(l.home).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return err
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "sentinel"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "sentinel"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	if _, err := kube.RbacV1().RoleBindings(l.home).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		return err
	}
	sentinel := request{home, "get", "test.handlerkit.dev", "sentinels", "", "waitCaughtUp"}
	for {
		ok, err := allowed(ctx, kube, user, l.home, sentinel)
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// denied returns those of rs that the authorizer denies user.
func denied(ctx context.Context, t *testing.T, kube kubernetes.Interface, l layout, user string, rs []request) []request {
	t.Helper()
	var out []request
	for _, r := range rs {
		ok, err := allowed(ctx, kube, user, l.ns(r.scope), r)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			out = append(out, r)
		}
	}
	return out
}

// grant is one verb on one resource of one rule of one Role.
type grant struct {
	role           string
	rule           int
	resource, verb string
}

// without returns rs with g removed.
func without(rs map[string]rbacv1.Role, g grant) map[string]rbacv1.Role {
	out := map[string]rbacv1.Role{}
	for name, r := range rs {
		r = *r.DeepCopy()
		if name == g.role {
			rule := &r.Rules[g.rule]
			if len(rule.Verbs) > 1 {
				rule.Verbs = slices.DeleteFunc(rule.Verbs, func(v string) bool { return v == g.verb })
			} else {
				rule.Resources = slices.DeleteFunc(rule.Resources, func(res string) bool { return res == g.resource })
			}
			if len(rule.Verbs) == 0 || len(rule.Resources) == 0 {
				r.Rules = slices.Delete(r.Rules, g.rule, g.rule+1)
			}
		}
		out[name] = r
	}
	return out
}

// TestRBACIsExactlyWhatTheOperatorRequests proves the operator's RBAC with
// the API server's own authorizer (SubjectAccessReviews), with both
// strategies on (deploy/overlays/exec: deploy/operator's Roles and the -exec
// one): bound as the manifests bind it, it allows every request the operator
// makes; and every single verb of every rule is needed: remove it and a
// request is denied. The ServiceAccount reads no Secrets, and in a namespace
// it does not serve it can neither exec nor add ephemeral containers.
// TestExecIsOptIn proves the default install the same less Exec.
func TestRBACIsExactlyWhatTheOperatorRequests(t *testing.T) {
	env := cluster.Get(t)
	kube := env.Clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var l layout
	var other string
	for _, p := range []*string{&l.home, &l.served, &other} {
		ns, err := env.CreateNamespace(ctx, "rbac")
		if err != nil {
			t.Fatal(err)
		}
		*p = ns
	}
	rs := roles(t, namespacedExec, "Role")
	if len(rs) != len(roleScopes) {
		t.Fatalf("%s has Roles %v, want %d", namespacedExec, slices.Sorted(maps.Keys(rs)), len(roleScopes))
	}
	checkBindings(t, namespacedExec, "RoleBinding", rs)

	// Every verb of every rule, removed one at a time, each from a copy bound
	// to a ServiceAccount of its own.
	var grantsList []grant
	for _, name := range slices.Sorted(maps.Keys(rs)) {
		for i, rule := range rs[name].Rules {
			if len(rule.ResourceNames) > 0 || len(rule.NonResourceURLs) > 0 {
				t.Errorf("%s rule %d: resourceNames or nonResourceURLs, which this test does not cover", name, i)
			}
			for _, res := range rule.Resources {
				for _, verb := range rule.Verbs {
					grantsList = append(grantsList, grant{name, i, res, verb})
				}
			}
		}
	}
	if err := bind(ctx, kube, l, "operator", "-full", rs); err != nil {
		t.Fatal(err)
	}
	for i, g := range grantsList {
		if err := bind(ctx, kube, l, fmt.Sprintf("without-%d", i), fmt.Sprintf("-without-%d", i), without(rs, g)); err != nil {
			t.Fatal(err)
		}
	}

	if err := waitCaughtUp(ctx, kube, l, "test-sentinel"); err != nil {
		t.Fatal(err)
	}
	for _, r := range denied(ctx, t, kube, l, l.user("operator"), operatorRequests) {
		t.Errorf("the manifests' RBAC denies what the operator does: %s", r)
	}
	for _, r := range []request{
		{served, "get", "", "secrets", "", ""}, {served, "list", "", "secrets", "", ""}, {served, "watch", "", "secrets", "", ""},
		{home, "get", "", "secrets", "", ""}, {home, "list", "", "secrets", "", ""}, {home, "watch", "", "secrets", "", ""},
		{served, "delete", "", "pods", "", ""}, {served, "update", "", "pods", "", ""},
		{served, "delete", jmxGroup, exporters, "", ""},
		{home, "delete", "coordination.k8s.io", "leases", "", ""},
	} {
		if ok, err := allowed(ctx, kube, l.user("operator"), l.ns(r.scope), r); err != nil || ok {
			t.Errorf("allowed %s (%v)", r, err)
		}
	}
	for _, r := range []request{
		{verb: "create", resource: "pods", subresource: "exec"},
		{verb: "patch", resource: "pods", subresource: "ephemeralcontainers"},
		{verb: "get", resource: "secrets"},
		{verb: "patch", resource: "pods"},
	} {
		if ok, err := allowed(ctx, kube, l.user("operator"), other, r); err != nil || ok {
			t.Errorf("allowed %s %s/%s in a namespace it does not serve (%v)", r.verb, r.resource, r.subresource, err)
		}
	}

	for i, g := range grantsList {
		name := fmt.Sprintf("%s rule %d: %s %s", g.role, g.rule, g.verb, g.resource)
		var needed, rest []request
		for _, r := range operatorRequests {
			rule := rs[g.role].Rules[g.rule]
			if roleScopes[g.role] == r.scope && slices.Contains(rule.APIGroups, r.group) && r.fullResource() == g.resource && r.verb == g.verb {
				needed = append(needed, r)
			} else {
				rest = append(rest, r)
			}
		}
		if len(needed) == 0 {
			t.Errorf("%s: the operator makes no request that needs it; remove it", name)
			continue
		}
		user := l.user(fmt.Sprintf("without-%d", i))
		for _, r := range denied(ctx, t, kube, l, user, rest) {
			t.Errorf("%s removed: %s denied too", name, r)
		}
		for _, r := range needed {
			if ok, err := allowed(ctx, kube, user, l.ns(r.scope), r); err != nil || ok {
				t.Errorf("%s removed, still allowed: %s (%v): another rule grants it too", name, r, err)
			}
		}
	}
}

// checkBindings fails unless every role in rs has a binding of kind to the
// operator's ServiceAccount in dir (in the ServiceAccount's namespace), and
// there is no other binding.
func checkBindings(t *testing.T, dir, kind string, rs map[string]rbacv1.Role) {
	t.Helper()
	bound := map[string]bool{}
	objs := build(t, dir)
	saNamespace := ""
	for _, o := range objs {
		if o.GetKind() == "ServiceAccount" && o.GetName() == "prometheus-jmx-exporter-operator" {
			saNamespace = o.GetNamespace()
		}
	}
	for _, o := range objs {
		if o.GetKind() != kind {
			continue
		}
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
		if isWebhookRole(ref) {
			continue // TestWebhookRBACIsTheWebhookPackagesRules
		}
		if ref == namespacesRole {
			continue // TestNamespacesClusterRoleOnlyGetsNamespaces
		}
		if len(subjects) != 1 || subjects[0].(map[string]any)["name"] != "prometheus-jmx-exporter-operator" {
			t.Errorf("%s %s: subjects %v", kind, o.GetName(), subjects)
		} else if ns, _ := subjects[0].(map[string]any)["namespace"].(string); ns != saNamespace {
			t.Errorf("%s %s: subject namespace %q, the ServiceAccount's is %q", kind, o.GetName(), ns, saNamespace)
		}
		bound[ref] = true
	}
	for name := range rs {
		if !bound[name] {
			t.Errorf("%s: %s is bound by no %s", dir, name, kind)
		}
	}
	if len(bound) != len(rs) {
		t.Errorf("%s: %d %ss for %d roles", dir, len(bound), kind, len(rs))
	}
}
