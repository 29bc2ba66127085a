package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	cachev1alpha1 "github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/apis/cache/v1alpha1"
	"github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/generated/clientset/versioned"
	"github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/handler"
	"github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/operator"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/testenv/freeport"
)

// operatorNamespace is the namespace deploy/rbac.yaml names; the test puts
// its objects into a namespace of its own instead.
const operatorNamespace = "memcached-operator"

// applyRBAC creates the objects of deploy/rbac.yaml, with the operator's
// namespace replaced by ns, and removes the cluster-scoped ones at cleanup.
// The test thereby proves that those rules, and no more, let it work.
func applyRBAC(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile("../deploy/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cs := env.Clientset()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("deploy/rbac.yaml: %v", err)
		}
		if m, err := meta.Accessor(obj); err == nil && m.GetNamespace() == operatorNamespace {
			m.SetNamespace(ns)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() { cs.RbacV1().ClusterRoles().Delete(context.Background(), o.Name, metav1.DeleteOptions{}) })
		case *rbacv1.ClusterRoleBinding:
			rebind(o.Subjects, ns)
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() { cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), o.Name, metav1.DeleteOptions{}) })
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			rebind(o.Subjects, ns)
			_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("deploy/rbac.yaml holds an unexpected %T", obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

func rebind(subjects []rbacv1.Subject, ns string) {
	for i := range subjects {
		if subjects[i].Namespace == operatorNamespace {
			subjects[i].Namespace = ns
		}
	}
}

// startOperator runs the operator in the test process, as the ServiceAccount
// of deploy/rbac.yaml, with leader election and the metrics server on, and
// stops it at cleanup. It returns the metrics server's address and a count
// of the operator's write requests to Deployments and Memcacheds.
func startOperator(t *testing.T, ns string) (string, *writeCounter) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg, err := env.ConfigForServiceAccount(ctx, ns, "memcached-operator")
	if err != nil {
		t.Fatal(err)
	}
	writes := &writeCounter{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return writes.wrap(rt) })
	port, err := freeport.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	log := logrus.New()
	log.SetOutput(testWriter{t})
	op, err := operator.New(cfg, operator.Config{
		Namespaces:              ns,
		Image:                   testimages.MemcachedRef,
		MetricsAddr:             addr,
		Registry:                prometheus.NewRegistry(),
		LeaderElection:          true,
		LeaderElectionNamespace: ns,
		Logger:                  log,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("operator Run: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("the operator did not stop within a minute of its context ending")
		}
		freeport.Release(port)
	})
	return addr, writes
}

// writeCounter counts the requests that would change a Deployment or a
// Memcached (anything but GET, LIST and WATCH). The API server answers an
// update that changes nothing without a new resourceVersion, so only the
// requests show whether the operator writes when nothing changed.
type writeCounter struct {
	mu    sync.Mutex
	calls []string
}

func (c *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet && (strings.Contains(req.URL.Path, "/deployments") || strings.Contains(req.URL.Path, "/memcacheds")) {
			c.mu.Lock()
			c.calls = append(c.calls, req.Method+" "+req.URL.Path)
			c.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func (c *writeCounter) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// testWriter sends the operator's log to the test's, shown on failure and with -v.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// eventually polls cond every 200ms until it returns true, failing the test
// with the last reason after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, why, err := cond(ctx)
		last = why
		return ok, err
	})
	if err != nil {
		t.Fatalf("%s: %v; last state: %s", what, err, last)
	}
}

// stats sends memcached's "stats" command to addr and returns its STAT lines.
func stats(addr string) (map[string]string, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "stats\r\n"); err != nil {
		return nil, err
	}
	out := map[string]string{}
	s := bufio.NewScanner(conn)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "END" {
			return out, nil
		}
		if f := strings.Fields(line); len(f) == 3 && f[0] == "STAT" {
			out[f[1]] = f[2]
		}
	}
	return nil, fmt.Errorf("no END in the stats reply from %s: %v", addr, s.Err())
}

// TestMemcachedScalesServesAndIsCleanedUp is the operator's life, end to
// end: a Memcached of 3, scaled to 4 and to 1, with the Deployment and
// status.nodes following and every memcached pod answering "stats" over
// the pod network; then deleting it runs the finalizer, and the garbage
// collector removes the Deployment, its ReplicaSets and pods.
func TestMemcachedScalesServesAndIsCleanedUp(t *testing.T) {
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, "memcached")
	if err != nil {
		t.Fatal(err)
	}
	applyRBAC(t, ns)
	metricsAddr, writes := startOperator(t, ns)

	client, err := versioned.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	mcs := client.CacheV1alpha1().Memcacheds(ns)
	m, err := mcs.Create(ctx, &cachev1alpha1.Memcached{
		ObjectMeta: metav1.ObjectMeta{Name: "sessions"},
		Spec:       cachev1alpha1.MemcachedSpec{Size: 3},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The API server enforces spec.size's bounds from the generated CRD
	// (pkg/operator's tests check them in full, without a node).
	for _, size := range []int32{-1, 101} {
		bad := &cachev1alpha1.Memcached{ObjectMeta: metav1.ObjectMeta{Name: "out-of-bounds"}, Spec: cachev1alpha1.MemcachedSpec{Size: size}}
		if _, err := mcs.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
			t.Fatalf("creating a Memcached of size %d: %v, want Invalid", size, err)
		}
	}

	for _, size := range []int32{3, 4, 1} {
		start := time.Now()
		if size != m.Spec.Size {
			m, err = mcs.Get(ctx, "sessions", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			m.Spec.Size = size
			if m, err = mcs.Update(ctx, m, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		nodes := waitServing(t, ns, size)
		t.Logf("size %d: %d pods serving and in status.nodes after %s", size, len(nodes), time.Since(start).Round(time.Millisecond))
	}

	// Create and two scalings: three spec changes of the Deployment, not one
	// more, however often pods and status woke the handler meanwhile.
	dep, err := env.Clientset().AppsV1().Deployments(ns).Get(ctx, "sessions", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dep.Generation != 3 {
		t.Errorf("Deployment generation %d, want 3 (create, scale to 4, scale to 1)", dep.Generation)
	}

	checkEvents(t, ns, handler.ReasonDeploymentCreated, handler.ReasonDeploymentScaled)
	checkMetrics(t, metricsAddr)

	// Nothing to change: wake the handler (an annotation is an update of the
	// Memcached) and see that it handles the event and writes nothing.
	before, handled := writes.snapshot(), handledCount(t, metricsAddr)
	patch := []byte(`{"metadata":{"annotations":{"e2e.handlerkit.dev/poke":"1"}}}`)
	if _, err := mcs.Patch(ctx, "sessions", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the handler to handle the poke", func(context.Context) (bool, string, error) {
		n := handledCount(t, metricsAddr)
		return n > handled, fmt.Sprintf("handled %v times, %v before", n, handled), nil
	})
	if after := writes.snapshot(); len(after) != len(before) {
		t.Errorf("the operator wrote although nothing changed: %v", after[len(before):])
	}

	start := time.Now()
	if err := mcs.Delete(ctx, "sessions", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the Memcached to be finalized and gone", func(ctx context.Context) (bool, string, error) {
		got, err := mcs.Get(ctx, "sessions", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return false, fmt.Sprintf("finalizers %v, nodes %v", got.Finalizers, got.Status.Nodes), nil
	})
	checkEvents(t, ns, handler.ReasonDraining, handler.ReasonCleanedUp)
	selector := labels.SelectorFromSet(map[string]string{handler.LabelInstance: "sessions"}).String()
	eventually(t, 2*time.Minute, "the garbage collector to delete the Deployment, ReplicaSets and pods", func(ctx context.Context) (bool, string, error) {
		cs := env.Clientset()
		_, err := cs.AppsV1().Deployments(ns).Get(ctx, "sessions", metav1.GetOptions{})
		if err == nil || !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("Deployment: %v", err), nil
		}
		rs, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, "", err
		}
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, "", err
		}
		return len(rs.Items) == 0 && len(pods.Items) == 0, fmt.Sprintf("%d ReplicaSets, %d pods", len(rs.Items), len(pods.Items)), nil
	})
	t.Logf("deleted, finalized and garbage-collected in %s", time.Since(start).Round(time.Millisecond))
}

// waitServing waits until the Deployment has size ready replicas and no
// others, status.nodes names exactly the running pods with Available=True
// for the current generation, and each pod's memcached answers "stats" on
// its pod IP. It returns the pod names.
func waitServing(t *testing.T, ns string, size int32) []string {
	t.Helper()
	cs := env.Clientset()
	client, err := versioned.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	selector := labels.SelectorFromSet(map[string]string{handler.LabelInstance: "sessions"}).String()
	var names, ips []string
	eventually(t, 3*time.Minute, fmt.Sprintf("%d memcached servers", size), func(ctx context.Context) (bool, string, error) {
		dep, err := cs.AppsV1().Deployments(ns).Get(ctx, "sessions", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "no Deployment yet", nil
		}
		if err != nil {
			return false, "", err
		}
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas != size || dep.Status.ReadyReplicas != size || dep.Status.Replicas != size {
			return false, fmt.Sprintf("Deployment spec %v, status %d replicas, %d ready", *dep.Spec.Replicas, dep.Status.Replicas, dep.Status.ReadyReplicas), nil
		}
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, "", err
		}
		names, ips = nil, nil
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			names = append(names, p.Name)
			ips = append(ips, p.Status.PodIP)
		}
		slices.Sort(names)
		m, err := client.CacheV1alpha1().Memcacheds(ns).Get(ctx, "sessions", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		why := fmt.Sprintf("pods %v, status.nodes %v, readyNodes %d, conditions %+v", names, m.Status.Nodes, m.Status.ReadyNodes, m.Status.Conditions)
		ok := len(names) == int(size) && slices.Equal(m.Status.Nodes, names) && m.Status.ReadyNodes == size &&
			m.Status.ObservedGeneration == m.Generation &&
			meta.IsStatusConditionTrue(m.Status.Conditions, cachev1alpha1.ConditionAvailable)
		return ok, why, nil
	})
	for i, ip := range ips {
		addr := net.JoinHostPort(ip, fmt.Sprint(handler.Port))
		st, err := stats(addr)
		if err != nil {
			t.Fatalf("memcached in pod %s: %v", names[i], err)
		}
		if st["pid"] == "" || !strings.HasPrefix(st["version"], "1.6") {
			t.Fatalf("memcached in pod %s answered stats without pid or version: %v", names[i], st)
		}
	}
	return names
}

// checkEvents waits until Events with each of the reasons exist about the
// Memcached "sessions".
func checkEvents(t *testing.T, ns string, reasons ...string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("Events %v", reasons), func(ctx context.Context) (bool, string, error) {
		list, err := env.Clientset().CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		var seen []string
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "Memcached" && e.InvolvedObject.Name == "sessions" {
				seen = append(seen, e.Reason)
			}
		}
		for _, r := range reasons {
			if !slices.Contains(seen, r) {
				return false, fmt.Sprintf("reasons seen: %v", seen), nil
			}
		}
		return true, "", nil
	})
}

// handledCount returns handlerkit_handle_total{result="success"} of the
// memcached watch, from the operator's /metrics.
func handledCount(t *testing.T, addr string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	prefix := `handlerkit_handle_total{result="success",watch="` + operator.WatchName + `"} `
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), prefix); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", s.Text(), err)
			}
			return n
		}
	}
	t.Fatalf("/metrics lacks %s", prefix)
	return 0
}

// checkMetrics reads the operator's metrics server: the framework's
// handling counter of the memcached watch and the leader election gauge.
func checkMetrics(t *testing.T, addr string) {
	t.Helper()
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %s", path, resp.Status)
		}
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`handlerkit_handle_total{result="success",watch="` + operator.WatchName + `"}`,
		`leader_election_master_status{name="` + operator.Name + `"} 1`,
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
