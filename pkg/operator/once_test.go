package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/operator"
	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// countingStrategy stands in for jmx-attach (the real one is tested end to
// end in test/e2e): it counts the calls per container start and config, and
// each call waits until the test lets it finish.
type countingStrategy struct {
	mu          sync.Mutex
	injects     map[string]int // container ID -> calls
	reconfigure map[string]int // container ID + config -> calls
	called      chan struct{}  // one value per call
	proceed     chan struct{}  // one value lets one call return
}

func (s *countingStrategy) Name() string { return string(jmxv1alpha1.InjectionEphemeralContainer) }

func (s *countingStrategy) Inject(ctx context.Context, t inject.Target, r inject.Request) (inject.Outcome, error) {
	s.mu.Lock()
	s.injects[t.ContainerID]++
	s.mu.Unlock()
	return s.finish(ctx, r)
}

func (s *countingStrategy) Reconfigure(ctx context.Context, t inject.Target, r inject.Request) (inject.Outcome, error) {
	s.mu.Lock()
	s.reconfigure[t.ContainerID+"\x00"+string(r.Config)]++
	s.mu.Unlock()
	return s.finish(ctx, r)
}

func (s *countingStrategy) finish(ctx context.Context, r inject.Request) (inject.Outcome, error) {
	s.called <- struct{}{}
	select {
	case <-s.proceed:
	case <-ctx.Done():
		return inject.Outcome{}, ctx.Err()
	}
	return inject.Outcome{Results: []jvm.InjectResult{{PID: 1, NSPID: 1, MainClass: "app.Main", Status: jvm.OutcomeOK, Port: int(r.Port)}}}, nil
}

func (s *countingStrategy) counts() (map[string]int, map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, b := map[string]int{}, map[string]int{}
	for k, v := range s.injects {
		a[k] = v
	}
	for k, v := range s.reconfigure {
		b[k] = v
	}
	return a, b
}

// TestAStaleCacheNeverInjectsAContainerStartTwice runs the operator against a
// real API server (no node: the test plays the kubelet by writing the pod's
// status). While an injection finishes, the operator's pod cache is held
// back, as a busy API server or informer can hold it, and a ConfigMap change
// wakes the exporter: it sees a pod without the record the injection just
// wrote. It must not inject (or reconfigure) that container start again,
// which with the EphemeralContainer strategy would add a second ephemeral
// container to the pod for nothing.
func TestAStaleCacheNeverInjectsAContainerStartTwice(t *testing.T) {
	// The shared API server (safety_test.go): this test's operator serves
	// only its own namespace, and its gate holds back only its own watches.
	env := sharedCluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, err := env.CreateNamespace(ctx, "once")
	if err != nil {
		t.Fatal(err)
	}
	kube := env.Clientset()
	jmx, err := versioned.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}

	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	// The operator's pod watches go through a gate the test can close; the
	// injections' own writes go through kube, which has none.
	gate := &watchGate{open: make(chan struct{})}
	close(gate.open)
	gated := rest.CopyConfig(env.Config())
	transport := &gatedWatches{gate: gate}
	gated.Wrap(func(rt http.RoundTripper) http.RoundTripper { transport.rt = rt; return transport })
	op, err := sdk.New(gated, sdk.WithScheme(scheme), sdk.WithRegisterer(prometheus.NewRegistry()),
		sdk.WithMetricsAddr("0"), sdk.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	strategy := &countingStrategy{injects: map[string]int{}, reconfigure: map[string]int{},
		called: make(chan struct{}, 16), proceed: make(chan struct{}, 16)}
	r, err := operator.Setup(op, operator.Options{Namespaces: ns, Client: kube,
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionEphemeralContainer: strategy}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- op.Run(runCtx) }()
	defer func() {
		gate.release()
		stop()
		if err := <-done; err != nil && err != context.Canceled {
			t.Errorf("Run: %v", err)
		}
		r.Wait()
	}()

	labels := map[string]string{"app": "orders"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "jvm", Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "jvm-app"}}}}
	if _, err = kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	setContainer(t, ctx, kube, ns, "containerd://aaa", 0)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"config.yaml": "rules:\n- pattern: \".*\"\n"}}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ex := &jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Name: "orders"},
		Spec: jmxv1alpha1.PrometheusJmxExporterSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Config: &jmxv1alpha1.ExporterConfig{ConfigMapName: "cfg", ConfigMapKey: "config.yaml"}}}
	if _, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Create(ctx, ex, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// finishWithStaleCache lets the running call finish while the pod cache
	// is held back, wakes the exporter through an unrelated ConfigMap key
	// several times, then lets the cache catch up.
	touches := 0
	finishWithStaleCache := func(written func() bool) {
		t.Helper()
		select {
		case <-strategy.called:
		case <-time.After(time.Minute):
			t.Fatal("the operator did not call the strategy within a minute")
		}
		gate.hold()
		strategy.proceed <- struct{}{}
		waitFor(t, written)
		for i := 0; i < 5; i++ {
			touches++
			patch := fmt.Sprintf(`{"data":{"unrelated":"u%d"}}`, touches)
			if _, err := kube.CoreV1().ConfigMaps(ns).Patch(ctx, "cfg", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond) // deliberate: separate wake-ups, not one coalesced event
		}
		gate.release()
		// A deliberate pause, not a wait: it gives anything planned from the stale cache the time to
		// start, so the counts below see it. There is no event for "nothing more will be planned";
		// on a slower machine the check proves less, it does not fail.
		time.Sleep(2 * time.Second)
	}

	finishWithStaleCache(func() bool { return liveRecord(ctx, kube, ns).ContainerID == "containerd://aaa" })
	firstHash := liveRecord(ctx, kube, ns).ConfigHash
	if injects, _ := strategy.counts(); len(injects) != 1 || injects["containerd://aaa"] != 1 {
		t.Fatalf("injections per container start %v, want exactly one of aaa", injects)
	}
	newConfig := "lowercaseOutputName: true\nrules:\n- pattern: \".*\"\n"
	patch := fmt.Sprintf(`{"data":{"config.yaml":%q}}`, newConfig)
	if _, err := kube.CoreV1().ConfigMaps(ns).Patch(ctx, "cfg", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	finishWithStaleCache(func() bool { return liveRecord(ctx, kube, ns).ConfigHash != firstHash })
	for {
		select {
		case <-strategy.called: // an extra call: let it finish, and count it below
			strategy.proceed <- struct{}{}
			continue
		default:
		}
		break
	}

	// Every read of pods came from the operator's trimmed cache.
	if n := transport.podLists.Load(); n != 0 {
		t.Errorf("the operator listed pods live %d times, want 0 (it reads its pod watch's cache)", n)
	}
	injects, reconfigs := strategy.counts()
	if len(injects) != 1 || injects["containerd://aaa"] != 1 {
		t.Errorf("injections per container start %v, want exactly one of aaa", injects)
	}
	if len(reconfigs) != 1 || reconfigs["containerd://aaa\x00"+newConfig] != 1 {
		t.Errorf("reconfigurations %v, want exactly one, of aaa with the new config", reconfigs)
	}
}

// setContainer plays the kubelet: the pod runs, with its container app
// running as the instance id.
func setContainer(t *testing.T, ctx context.Context, kube kubernetes.Interface, ns, id string, restarts int32) {
	t.Helper()
	for try := 0; ; try++ {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, "jvm", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.5"
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", ContainerID: id, Ready: true, RestartCount: restarts,
			Image: "jvm-app", ImageID: "sha256:1", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
		_, err = kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if try > 20 {
			t.Fatal(err)
		}
	}
}

// liveRecord is the record of the pod's container app, read live.
func liveRecord(ctx context.Context, kube kubernetes.Interface, ns string) operator.ContainerRecord {
	p, err := kube.CoreV1().Pods(ns).Get(ctx, "jvm", metav1.GetOptions{})
	if err != nil {
		return operator.ContainerRecord{}
	}
	var rec operator.PodRecord
	if err := json.Unmarshal([]byte(p.Annotations[operator.AnnotationAgents]), &rec); err != nil {
		return operator.ContainerRecord{}
	}
	return rec.Containers["app"]
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watchGate holds back the bytes of pod watches while it is closed.
type watchGate struct {
	mu   sync.Mutex
	open chan struct{} // closed while the gate is open
}

func (g *watchGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

func (g *watchGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *watchGate) wait() {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	<-ch
}

// gatedWatches passes watches of pods through the gate, and counts the
// lists of pods that are not watches (live reads).
type gatedWatches struct {
	rt       http.RoundTripper
	gate     *watchGate
	podLists atomic.Int32
}

func (g *gatedWatches) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/pods") && req.URL.Query().Get("watch") != "true" {
		g.podLists.Add(1)
	}
	resp, err := g.rt.RoundTrip(req)
	if err != nil || req.URL.Query().Get("watch") != "true" || !strings.HasSuffix(req.URL.Path, "/pods") {
		return resp, err
	}
	resp.Body = &gatedBody{ReadCloser: resp.Body, gate: g.gate}
	return resp, nil
}

type gatedBody struct {
	io.ReadCloser
	gate *watchGate
}

func (b *gatedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.gate.wait() // what was read is handed on only while the gate is open
	return n, err
}
