package leader_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/handlerkit/handlerkit/pkg/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/handlerkit/handlerkit/pkg/leader"
)

// env is one control plane shared by every test and benchmark of the package; each test uses its own namespace.
var env *testenv.Environment

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// client-go's leaderelection logs every attempt through klog; the tests' own logs say what matters.
	flags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(flags)
	for name, value := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := flags.Set(name, value); err != nil {
			fmt.Fprintln(os.Stderr, "klog:", err)
			return 1
		}
	}
	klog.SetOutput(io.Discard)
	// Importing pkg/sdk installs a klog logger that writes to stderr until an
	// Operator routes klog; a discarding logger, set before any goroutine,
	// keeps these tests quiet (the tests' own Operators then leave klog be).
	klog.SetLogger(logr.Discard())
	var err error
	env, err = testenv.Start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv stop:", err)
		}
	}()
	return m.Run()
}

// operatorLabels are the labels the test Deployment would give every replica.
var operatorLabels = map[string]string{"app": "test-operator"}

// fastBackoff keeps leader-for-life tests quick; production uses leader.DefaultBackoff.
var fastBackoff = wait.Backoff{Duration: 50 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Cap: 300 * time.Millisecond}

func testLogger(t testing.TB) logrus.FieldLogger {
	w := &testWriter{t: t}
	// Goroutines of a finished test may still log while they stop; t.Log would panic then, so drop those lines.
	t.Cleanup(w.close)
	l := logrus.New()
	l.SetOutput(w)
	l.SetLevel(logrus.DebugLevel)
	if _, ok := t.(*testing.B); ok {
		l.SetLevel(logrus.WarnLevel) // benchmark output is for the figures
	}
	return l.WithField("test", t.Name())
}

type testWriter struct {
	mu     sync.Mutex
	t      testing.TB
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

func newNamespace(t testing.TB) string {
	t.Helper()
	ns, err := env.CreateNamespace(context.Background(), "leader")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

func createPod(t testing.TB, ns, name string, podLabels map[string]string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: podLabels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "operator:test"}}},
	}
	created, err := env.Clientset().CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func setPodStatus(t testing.TB, ns, name string, phase corev1.PodPhase, reason string) {
	t.Helper()
	ctx := context.Background()
	pod, err := env.Clientset().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = phase
	pod.Status.Reason = reason
	if _, err := env.Clientset().CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func deletePod(t testing.TB, ns, name string) {
	t.Helper()
	// No kubelet runs, so a graceful delete would wait forever for it; zero grace removes the object at once.
	if err := env.Clientset().CoreV1().Pods(ns).Delete(context.Background(), name,
		metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
}

// labelledPods returns the names of the pods in ns that carry leader=true.
func labelledPods(t testing.TB, ns string) []string {
	t.Helper()
	list, err := env.Clientset().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{leader.DefaultLabelKey: leader.DefaultLabelValue}).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	return names
}

// eventually polls cond until it holds or the timeout passes; the timeout only bounds a hung test.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func onlyLabelled(t testing.TB, ns, pod string) func() bool {
	return func() bool {
		got := labelledPods(t, ns)
		return len(got) == 1 && got[0] == pod
	}
}

// masterStatus reads leader_election_master_status{name} from reg; -1 when the series does not exist.
func masterStatus(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "leader_election_master_status" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == name {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

type elector interface {
	Lead(ctx context.Context) (context.Context, error)
	Release(ctx context.Context) error
}

// replica is one contender running Lead in a goroutine, as a replica's main would.
type replica struct {
	name    string
	cancel  func()        // ends the wait, then releases what Lead acquired, as sdk.Run does at shutdown
	crash   func()        // ends the wait without releasing, as a crashed process would
	done    chan struct{} // closed when Lead returned
	leadCtx context.Context
	err     error
}

func startReplica(t testing.TB, name string, e elector) *replica {
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{name: name, done: make(chan struct{})}
	var once sync.Once
	r.cancel = func() {
		once.Do(func() {
			cancel()
			<-r.done
			rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer rcancel()
			if err := e.Release(rctx); err != nil {
				t.Errorf("%s: Release: %v", name, err)
			}
		})
	}
	r.crash = func() {
		cancel()
		<-r.done
	}
	t.Cleanup(r.cancel)
	go func() {
		defer close(r.done)
		r.leadCtx, r.err = e.Lead(ctx)
	}()
	return r
}

// startReplicas creates n operator pods op-0 … op-<n-1> in ns and starts a
// contender for each, with the elector newElector builds and a registry of
// its own, returned by pod name.
func startReplicas(t testing.TB, ns string, n int, newElector func(name string, reg *prometheus.Registry) elector) ([]*replica, map[string]*prometheus.Registry) {
	t.Helper()
	var rs []*replica
	regs := map[string]*prometheus.Registry{}
	for i := range n {
		name := fmt.Sprintf("op-%d", i)
		createPod(t, ns, name, operatorLabels)
		regs[name] = prometheus.NewRegistry()
		rs = append(rs, startReplica(t, name, newElector(name, regs[name])))
	}
	return rs, regs
}

// leading reports whether Lead has returned with leadership.
func (r *replica) leading() bool {
	select {
	case <-r.done:
		return r.err == nil
	default:
		return false
	}
}

func leaders(rs []*replica) []*replica {
	var out []*replica
	for _, r := range rs {
		if r.leading() {
			out = append(out, r)
		}
	}
	return out
}
