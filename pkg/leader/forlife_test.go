package leader_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/handlerkit/handlerkit/pkg/leader"
)

const lockName = "test-operator-lock"

func newForLife(t testing.TB, ns, pod string, reg *prometheus.Registry, opts ...leader.Option) *leader.ForLife {
	t.Helper()
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	base := []leader.Option{
		leader.WithNamespace(ns), leader.WithPodName(pod), leader.WithRegisterer(reg),
		leader.WithBackoff(fastBackoff), leader.WithLabelInterval(500 * time.Millisecond), leader.WithLogger(testLogger(t)),
	}
	f, err := leader.NewForLife(env.Config(), lockName, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func lockOwner(t testing.TB, ns string) (metav1.OwnerReference, *corev1.ConfigMap) {
	t.Helper()
	cm, err := env.Clientset().CoreV1().ConfigMaps(ns).Get(context.Background(), lockName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cm.OwnerReferences) != 1 {
		t.Fatalf("lock owners = %v, want exactly one", cm.OwnerReferences)
	}
	return cm.OwnerReferences[0], cm
}

func TestForLifeExactlyOneOfThreeLeadsAndIsLabelled(t *testing.T) {
	ns := newNamespace(t)
	rs, regs := startReplicas(t, ns, 3, func(name string, reg *prometheus.Registry) elector {
		return newForLife(t, ns, name, reg)
	})
	eventually(t, 30*time.Second, "one replica leads", func() bool { return len(leaders(rs)) == 1 })
	l := leaders(rs)[0]
	eventually(t, 30*time.Second, "only the leader's pod is labelled", onlyLabelled(t, ns, l.name))

	owner, _ := lockOwner(t, ns)
	if owner.Kind != "Pod" || owner.Name != l.name || owner.Controller == nil || !*owner.Controller {
		t.Errorf("lock owner = %+v, want controller reference to pod %s", owner, l.name)
	}
	for name, reg := range regs {
		want := 0.0
		if name == l.name {
			want = 1
		}
		if got := masterStatus(t, reg, lockName); got != want {
			t.Errorf("%s: leader_election_master_status = %v, want %v", name, got, want)
		}
	}
	// Stand-by replicas stay blocked: nobody else has led by the time the label is settled.
	if n := len(leaders(rs)); n != 1 {
		t.Errorf("%d leaders, want 1", n)
	}
}

func TestForLifeTakesOverStaleLock(t *testing.T) {
	cases := []struct {
		name string
		stop func(t *testing.T, ns, pod string)
	}{
		{"owner pod deleted", func(t *testing.T, ns, pod string) { deletePod(t, ns, pod) }},
		{"owner pod failed", func(t *testing.T, ns, pod string) { setPodStatus(t, ns, pod, corev1.PodFailed, "") }},
		{"owner pod succeeded", func(t *testing.T, ns, pod string) { setPodStatus(t, ns, pod, corev1.PodSucceeded, "") }},
		{"owner pod evicted", func(t *testing.T, ns, pod string) { setPodStatus(t, ns, pod, corev1.PodFailed, "Evicted") }},
		{"owner pod replaced by one with the same name", func(t *testing.T, ns, pod string) {
			deletePod(t, ns, pod)
			createPod(t, ns, pod, map[string]string{"app": "unrelated"})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			createPod(t, ns, "op-a", operatorLabels)
			createPod(t, ns, "op-b", operatorLabels)
			regB := prometheus.NewRegistry()
			a := startReplica(t, "op-a", newForLife(t, ns, "op-a", nil))
			eventually(t, 30*time.Second, "op-a leads", a.leading)
			eventually(t, 30*time.Second, "op-a labelled", onlyLabelled(t, ns, "op-a"))
			b := startReplica(t, "op-b", newForLife(t, ns, "op-b", regB))

			// b must keep waiting while a's pod is healthy: give it several backoff rounds, then check.
			// A deliberate pause, not a wait: it proves that b does not take over.
			time.Sleep(time.Second)
			if b.leading() {
				t.Fatal("op-b leads while op-a's pod is healthy")
			}
			if got := masterStatus(t, regB, lockName); got != 0 {
				t.Fatalf("op-b master status = %v while waiting, want 0", got)
			}

			a.cancel() // a's process is gone; its pod object remains until tc.stop
			tc.stop(t, ns, "op-a")
			eventually(t, 30*time.Second, "op-b takes over", b.leading)
			eventually(t, 30*time.Second, "the label moves to op-b", onlyLabelled(t, ns, "op-b"))
			owner, _ := lockOwner(t, ns)
			if owner.Name != "op-b" {
				t.Errorf("lock owner = %s, want op-b", owner.Name)
			}
			if got := masterStatus(t, regB, lockName); got != 1 {
				t.Errorf("op-b master status = %v, want 1", got)
			}
		})
	}
}

// TestForLifeStandbyWakesWhenHolderPodChanges gives the stand-by a backoff far longer than the test's patience:
// only the watch on the holder's pod can make it take over in time.
func TestForLifeStandbyWakesWhenHolderPodChanges(t *testing.T) {
	ns := newNamespace(t)
	createPod(t, ns, "op-a", operatorLabels)
	createPod(t, ns, "op-b", operatorLabels)
	slow := leader.WithBackoff(wait.Backoff{Duration: 10 * time.Minute, Factor: 1, Cap: 10 * time.Minute})
	a := startReplica(t, "op-a", newForLife(t, ns, "op-a", nil))
	eventually(t, 30*time.Second, "op-a leads", a.leading)
	waiting := &messageHook{substr: "waiting for leadership", seen: make(chan struct{})}
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	logger.AddHook(waiting)
	b := startReplica(t, "op-b", newForLife(t, ns, "op-b", nil, slow, leader.WithLogger(logger)))
	select {
	case <-waiting.seen: // op-b has looked at the lock once and is now in its long backoff
	case <-time.After(30 * time.Second):
		t.Fatal("op-b never started waiting")
	}
	a.cancel()
	setPodStatus(t, ns, "op-a", corev1.PodFailed, "")
	eventually(t, 2*time.Minute, "op-b takes over long before its 10 minute backoff", b.leading)
}

func TestForLifeCrashRestartWithSamePodUIDContinuesAsLeader(t *testing.T) {
	ns := newNamespace(t)
	createPod(t, ns, "op-a", operatorLabels)
	createPod(t, ns, "op-b", operatorLabels)
	a := startReplica(t, "op-a", newForLife(t, ns, "op-a", nil))
	eventually(t, 30*time.Second, "op-a leads", a.leading)
	_, before := lockOwner(t, ns)
	b := startReplica(t, "op-b", newForLife(t, ns, "op-b", nil))

	// The container crashes and restarts: the process ends without releasing, the pod (and its UID) stays.
	// (A clean shutdown releases the lock; see TestShutdownCancelsHandlersAtOnceAndReleasesOnlyAfterThem.)
	a.crash()
	a2 := startReplica(t, "op-a", newForLife(t, ns, "op-a", nil))
	eventually(t, 30*time.Second, "the restarted op-a leads again", a2.leading)
	_, after := lockOwner(t, ns)
	if after.UID != before.UID {
		t.Errorf("the lock was re-created (uid %s -> %s); the restarted leader should have kept it", before.UID, after.UID)
	}
	eventually(t, 30*time.Second, "op-a keeps the label", onlyLabelled(t, ns, "op-a"))
	if b.leading() {
		t.Error("op-b leads although op-a restarted with the same pod UID")
	}
}

func TestForLifeOutsideClusterLeadsAtOnce(t *testing.T) {
	t.Setenv("POD_NAME", "")
	t.Setenv("POD_NAMESPACE", "")
	reg := prometheus.NewRegistry()
	f, err := leader.NewForLife(env.Config(), lockName, leader.WithRegisterer(reg), leader.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	leadCtx, err := f.Lead(ctx)
	if err != nil {
		t.Fatalf("Lead outside a cluster: %v", err)
	}
	if leadCtx.Err() != nil {
		t.Fatal("lead context already ended")
	}
	if got := masterStatus(t, reg, lockName); got != 1 {
		t.Errorf("master status = %v, want 1", got)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatalf("Release outside a cluster: %v", err)
	}
	select {
	case <-leadCtx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lead context did not end with Release")
	}
	if got := masterStatus(t, reg, lockName); got != 0 {
		t.Errorf("master status after Release = %v, want 0", got)
	}
	// Become has no in-cluster config here; it must still skip, not fail.
	if err := leader.Become(ctx, lockName, leader.WithRegisterer(prometheus.NewRegistry()), leader.WithLogger(testLogger(t))); err != nil {
		t.Errorf("Become outside a cluster: %v", err)
	}
}

func TestForLifeLeadReturnsWhenContextEnds(t *testing.T) {
	ns := newNamespace(t)
	createPod(t, ns, "op-a", operatorLabels)
	createPod(t, ns, "op-b", operatorLabels)
	a := startReplica(t, "op-a", newForLife(t, ns, "op-a", nil))
	eventually(t, 30*time.Second, "op-a leads", a.leading)
	b := startReplica(t, "op-b", newForLife(t, ns, "op-b", nil))
	b.cancel()
	select {
	case <-b.done:
	case <-time.After(30 * time.Second):
		t.Fatal("Lead did not return after its context was cancelled")
	}
	if b.err == nil {
		t.Fatal("Lead returned leadership after its context was cancelled")
	}
}

func TestForLifeMissingOwnPodIsAnError(t *testing.T) {
	ns := newNamespace(t)
	f := newForLife(t, ns, "no-such-pod", nil)
	if _, err := f.Lead(testContext(t)); err == nil {
		t.Fatal("Lead succeeded without its own pod")
	}
}

// messageHook closes seen the first time a log message contains substr.
type messageHook struct {
	substr string
	once   sync.Once
	seen   chan struct{}
}

func (h *messageHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h *messageHook) Fire(e *logrus.Entry) error {
	if strings.Contains(e.Message, h.substr) {
		h.once.Do(func() { close(h.seen) })
	}
	return nil
}

// serviceAccountWithClusterRules binds the ServiceAccount ns/name to a ClusterRole with exactly rules as well.
func serviceAccountWithClusterRules(t *testing.T, ns, name string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	kube := env.Clientset()
	role := ns + "-" + name
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: rules,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), role, metav1.DeleteOptions{})
		_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{})
	})
}

// createNode creates a Node object whose Ready condition has status ready, as a node controller would report it.
func createNode(t *testing.T, name string, ready corev1.ConditionStatus) {
	t.Helper()
	ctx := context.Background()
	nodes := env.Clientset().CoreV1().Nodes()
	n, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodes.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastHeartbeatTime: metav1.Now()}}
	if _, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createScheduledPod creates an operator pod bound to node: without a kubelet there, a graceful delete leaves it
// Terminating for good, as on a node that has gone away.
func createScheduledPod(t *testing.T, ns, name, node string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: operatorLabels},
		Spec: corev1.PodSpec{NodeName: node,
			Containers: []corev1.Container{{Name: "operator", Image: "operator:test"}}},
	}
	if _, err := env.Clientset().CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Clientset().CoreV1().Pods(ns).Delete(context.Background(), name,
			metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
	})
}

func TestForLifeTakesOverFromHolderStuckTerminatingOnLostNode(t *testing.T) {
	cases := []struct {
		name     string
		node     string
		ready    corev1.ConditionStatus // "" creates no Node object: the node is gone
		takeover bool
	}{
		{name: "node NotReady", node: "node-notready", ready: corev1.ConditionFalse, takeover: true},
		{name: "node Unknown", node: "node-unknown", ready: corev1.ConditionUnknown, takeover: true},
		{name: "node gone", node: "node-gone", takeover: true},
		{name: "node Ready", node: "node-ready", ready: corev1.ConditionTrue, takeover: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			nodeName := ns + "-" + tc.node
			if tc.ready != "" {
				createNode(t, nodeName, tc.ready)
			}
			// The replicas run with exactly the documented rules, so the node check is proven to be allowed.
			cfg := serviceAccountWithRules(t, ns, "operator", leader.PolicyRules())
			serviceAccountWithClusterRules(t, ns, "operator", leader.ClusterPolicyRules())
			createScheduledPod(t, ns, "op-a", nodeName)
			createPod(t, ns, "op-b", operatorLabels)
			newElector := func(pod string) *leader.ForLife {
				f, err := leader.NewForLife(cfg, lockName, leader.WithNamespace(ns), leader.WithPodName(pod),
					leader.WithRegisterer(prometheus.NewRegistry()), leader.WithBackoff(fastBackoff),
					leader.WithLabelInterval(500*time.Millisecond), leader.WithLogger(testLogger(t).WithField("replica", pod)))
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
			a := startReplica(t, "op-a", newElector("op-a"))
			eventually(t, 30*time.Second, "op-a leads", a.leading)
			b := startReplica(t, "op-b", newElector("op-b"))

			// op-a's pod is deleted but its node never confirms: it stays Terminating.
			if err := env.Clientset().CoreV1().Pods(ns).Delete(context.Background(), "op-a", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			p, err := env.Clientset().CoreV1().Pods(ns).Get(context.Background(), "op-a", metav1.GetOptions{})
			if err != nil || p.DeletionTimestamp == nil {
				t.Fatalf("op-a after delete: %v, %v; want it Terminating", p, err)
			}
			deleted := time.Now()
			if !tc.takeover {
				// A deliberate pause, not a wait: it proves over many backoff steps of fastBackoff (cap 300ms)
				// that op-b does not take over.
				time.Sleep(3 * time.Second)
				if b.leading() {
					t.Fatal("op-b took over from a terminating holder whose node is Ready")
				}
				return
			}
			eventually(t, 30*time.Second, "op-b takes over", b.leading)
			t.Logf("holder deleted -> stand-by leads: %s", time.Since(deleted))
			if owner, _ := lockOwner(t, ns); owner.Name != "op-b" {
				t.Errorf("lock owner = %s, want op-b", owner.Name)
			}
			// The old holder, if it still runs somewhere, notices its lock is gone and stops leading.
			select {
			case <-a.leadCtx.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("op-a's lead context did not end after its lock was taken over")
			}
		})
	}
}

func TestForLifeLockDeletedByHandEndsLeadership(t *testing.T) {
	ns := newNamespace(t)
	createPod(t, ns, "op-a", operatorLabels)
	reg := prometheus.NewRegistry()
	a := startReplica(t, "op-a", newForLife(t, ns, "op-a", reg))
	eventually(t, 30*time.Second, "op-a leads", a.leading)
	eventually(t, 30*time.Second, "op-a labelled", onlyLabelled(t, ns, "op-a"))
	if err := env.Clientset().CoreV1().ConfigMaps(ns).Delete(context.Background(), lockName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	select {
	case <-a.leadCtx.Done():
		t.Logf("lock deleted -> lead context ended: %s", time.Since(deleted))
	case <-time.After(30 * time.Second):
		t.Fatal("the lead context did not end after the lock was deleted")
	}
	eventually(t, 10*time.Second, "status drops to 0", func() bool { return masterStatus(t, reg, lockName) == 0 })
	// op-a does not re-create the lock by itself: a second leader could have taken it in between.
	// A deliberate pause, not a wait: it proves that nothing re-creates the lock for a second.
	time.Sleep(time.Second)
	if _, err := env.Clientset().CoreV1().ConfigMaps(ns).Get(context.Background(), lockName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("lock after deletion: %v, want NotFound", err)
	}
}
