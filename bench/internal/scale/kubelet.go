package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// kubeletWorkers is how many ephemeral containers the simulated kubelet
// answers at once.
const kubeletWorkers = 8

// kubelet plays the kubelet of every benchmark pod: it answers the
// operator's ephemeral containers at once and follows the pod records the
// operator writes.
type kubelet struct {
	client kubernetes.Interface
	ns     string
	queue  chan string // pod names with an ephemeral container to answer

	mu       sync.Mutex
	pods     map[string]*simPod
	queued   map[string]bool // pod names in queue
	recorded int             // pods whose current container start has a record with JVMs
	answered int             // ephemeral containers answered
	changed  chan struct{}   // closed and replaced when recorded changes
	errs     []error
}

// simPod is what the kubelet knows of one pod.
type simPod struct {
	index       int
	containerID string    // the current container start
	restarts    int32     // restartCount
	runningAt   time.Time // when the current start was reported running
	recordedAt  time.Time // when its record showed the current start; zero until then
}

func newKubelet(client kubernetes.Interface, ns string) *kubelet {
	return &kubelet{client: client, ns: ns, queue: make(chan string, 1<<16),
		pods: map[string]*simPod{}, queued: map[string]bool{}, changed: make(chan struct{})}
}

// run watches the namespace's pods and answers ephemeral containers until
// ctx ends; it returns once the informer has synced.
func (k *kubelet) run(ctx context.Context) error {
	f := informers.NewSharedInformerFactoryWithOptions(k.client, 0, informers.WithNamespace(k.ns))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.observe(obj) },
		UpdateFunc: func(_, obj any) { k.observe(obj) },
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	for range kubeletWorkers {
		go k.work(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("scale: the kubelet's pod informer did not sync: %w", context.Cause(ctx))
	}
	return nil
}

// started registers a container start the benchmark reported running.
func (k *kubelet) started(name string, index int, containerID string, restarts int32, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.pods[name]
	if p == nil {
		p = &simPod{index: index}
		k.pods[name] = p
	}
	if !p.recordedAt.IsZero() {
		k.recorded--
	}
	p.containerID, p.restarts, p.runningAt, p.recordedAt = containerID, restarts, at, time.Time{}
}

// observe notes the pod's record and queues its unanswered ephemeral
// containers.
func (k *kubelet) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if p := k.pods[pod.Name]; p != nil && p.recordedAt.IsZero() && recordShows(pod, p.containerID) {
		p.recordedAt = time.Now()
		k.recorded++
		close(k.changed)
		k.changed = make(chan struct{})
	}
	if len(unanswered(pod)) > 0 && !k.queued[pod.Name] {
		k.queued[pod.Name] = true
		k.queue <- pod.Name
	}
}

// recordShows says whether the operator's record on pod shows the agent in
// the container start containerID.
func recordShows(pod *corev1.Pod, containerID string) bool {
	raw := pod.Annotations[operator.AnnotationAgents]
	if raw == "" {
		return false
	}
	var rec operator.PodRecord
	if json.Unmarshal([]byte(raw), &rec) != nil {
		return false
	}
	c, ok := rec.Containers[containerName]
	return ok && c.ContainerID == containerID && len(c.JVMs) > 0
}

// unanswered returns the operator's ephemeral containers of pod that have
// no status yet.
func unanswered(pod *corev1.Pod) []corev1.EphemeralContainer {
	have := map[string]bool{}
	for _, st := range pod.Status.EphemeralContainerStatuses {
		have[st.Name] = true
	}
	var out []corev1.EphemeralContainer
	for _, ec := range pod.Spec.EphemeralContainers {
		if strings.HasPrefix(ec.Name, inject.ContainerNamePrefix) && !have[ec.Name] {
			out = append(out, ec)
		}
	}
	return out
}

// work answers queued pods until ctx ends.
func (k *kubelet) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case name := <-k.queue:
			k.mu.Lock()
			delete(k.queued, name)
			k.mu.Unlock()
			if err := k.answer(ctx, name); err != nil && ctx.Err() == nil {
				k.mu.Lock()
				k.errs = append(k.errs, err)
				k.mu.Unlock()
			}
		}
	}
}

// answer reports every unanswered ephemeral container of the pod as
// terminated with jmx-attach's result, as the kubelet would once
// jmx-attach ended.
func (k *kubelet) answer(ctx context.Context, name string) error {
	pods := k.client.CoreV1().Pods(k.ns)
	for try := 0; ; try++ {
		pod, err := getPod(ctx, pods, name)
		if err != nil {
			return fmt.Errorf("scale: kubelet: get pod %s: %w", name, err)
		}
		ecs := unanswered(pod)
		if len(ecs) == 0 {
			return nil
		}
		for _, ec := range ecs {
			pod.Status.EphemeralContainerStatuses = append(pod.Status.EphemeralContainerStatuses, terminatedStatus(pod, ec))
		}
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{FieldManager: "kubelet"})
		switch {
		case err == nil:
			k.mu.Lock()
			k.answered += len(ecs)
			k.mu.Unlock()
			return nil
		case (apierrors.IsConflict(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)) && try < 20:
			continue
		default:
			return fmt.Errorf("scale: kubelet: answer the ephemeral containers of %s: %w", name, err)
		}
	}
}

// terminatedStatus is the status of ephemeral container ec once jmx-attach
// in it ended: exit code 0 and the termination log jmx-attach writes, one
// JVM with the agent loaded on the requested port.
func terminatedStatus(pod *corev1.Pod, ec corev1.EphemeralContainer) corev1.ContainerStatus {
	port := requestedPort(ec.Command)
	var started time.Time
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == ec.TargetContainerName && cs.State.Running != nil {
			started = cs.State.Running.StartedAt.Time
		}
	}
	result := jvm.InjectResult{
		PID: 4127, NSPID: 1, MainClass: "com.example.payments.Application", Status: jvm.OutcomeOK,
		Message: fmt.Sprintf("agent loaded; serving on port %d", port), Port: port,
		AgentPath: "/tmp/.jmx-exporter/jmx_prometheus_javaagent.jar", ConfigPath: "/tmp/.jmx-exporter/config.yaml",
		JavaVersion: "21.0.9", StartedAt: started.Truncate(10 * time.Millisecond),
	}
	if strings.Contains(strings.Join(ec.Command, " "), " reconfigure ") {
		result.Status, result.Message = jvm.OutcomeUnchanged, "config unchanged"
	}
	now := metav1.Now()
	return corev1.ContainerStatus{
		Name:        ec.Name,
		Image:       ec.Image,
		ImageID:     ec.Image,
		ContainerID: "containerd://" + hashID(pod.Name, ec.Name),
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now,
			Message:     string(jvm.FormatTerminationLog([]jvm.InjectResult{result})),
			ContainerID: "containerd://" + hashID(pod.Name, ec.Name),
		}},
	}
}

// requestedPort reads jmx-attach's --port from the ephemeral container's
// command (9404 when it has none, as for reconfigure).
func requestedPort(command []string) int {
	for i, a := range command {
		if a == "--port" && i+1 < len(command) {
			if p, err := strconv.Atoi(strings.Split(command[i+1], ",")[0]); err == nil {
				return p
			}
		}
	}
	return int(exporterPort)
}

// hashID is a container ID made of parts: 64 hex digits, as containerd's.
func hashID(parts ...string) string {
	var b strings.Builder
	for i := range 4 {
		h := fnv.New64a()
		fmt.Fprint(h, i)
		for _, p := range parts {
			h.Write([]byte(p))
			h.Write([]byte{0})
		}
		fmt.Fprintf(&b, "%016x", h.Sum64())
	}
	return b.String()
}

// counts returns how many pods are recorded and ephemeral containers
// answered, and a channel closed at the next change of the former.
func (k *kubelet) counts() (recorded, answered int, changed <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.recorded, k.answered, k.changed
}

// err returns the first error the kubelet met, if any.
func (k *kubelet) err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w (and %d more)", k.errs[0], len(k.errs)-1)
}

// latencies returns, for the container starts reported running at or after
// since, the time from running to recorded; unrecorded counts those not
// recorded yet.
func (k *kubelet) latencies(since time.Time) (d []time.Duration, unrecorded int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.pods {
		if p.runningAt.Before(since) {
			continue
		}
		if p.recordedAt.IsZero() {
			unrecorded++
			continue
		}
		d = append(d, p.recordedAt.Sub(p.runningAt))
	}
	return d, unrecorded
}
