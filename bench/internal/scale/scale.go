package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/handlerkit/handlerkit/bench/internal/workload"
	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// Shapes of the workload.
const (
	// ShapeOne is one exporter selecting every pod.
	ShapeOne = "one"
	// ShapeMany is one exporter per Config.PodsPerExporter pods.
	ShapeMany = "many"
)

// containerName is the benchmark pods' one container.
const containerName = "app"

// exporterPort is the exporters' spec.port.
const exporterPort = int32(9404)

// Config is one run of the benchmark.
type Config struct {
	// Pods is how many pods are created (issue 28: 10,000).
	Pods int
	// Shape is ShapeOne or ShapeMany.
	Shape string
	// PodsPerExporter is how many pods each exporter selects in ShapeMany.
	PodsPerExporter int
	// RestartRate is how many containers are restarted per second in the
	// steady-state phase, and SteadyDuration how long that phase restarts
	// them. A pod is restarted at most MaxRestartsPerPod times, so that
	// its ephemeral container budget (5 in its life by default) holds.
	RestartRate    float64
	SteadyDuration time.Duration
	// Operator is the operator binary; OperatorArgs are added to the flags
	// the benchmark sets (--kubeconfig, --namespaces, no leader election,
	// no webhook, no PodMonitors, the metrics address).
	Operator     string
	OperatorArgs []string
	// OperatorEnv are NAME=VALUE pairs added to the operator's otherwise
	// clean environment (PATH and HOME).
	OperatorEnv []string
	// Profile saves the operator's heap profile (heap-<namespace>-<phase>.pprof
	// in Dir) once every pod is recorded and at the end; the operator must be
	// a ProfiledBuild.
	Profile bool
	// Timeout bounds the wait for every container start to be recorded, in
	// each phase.
	Timeout time.Duration
	// Dir holds the operator's log and kubeconfig.
	Dir string
	// Progress, when set, gets a line per step.
	Progress io.Writer
}

// MaxRestartsPerPod bounds the restarts of one pod: its first start and
// three restarts take four of the five ephemeral containers a pod may get
// from the operator in its life (--ephemeral-container-budget).
const MaxRestartsPerPod = 3

// Result holds the figures of one run.
type Result struct {
	Shape     string `json:"shape"`
	Pods      int    `json:"pods"`
	Exporters int    `json:"exporters"`
	// OperatorEnv is Config.OperatorEnv (GOMEMLIMIT, for example).
	OperatorEnv []string `json:"operatorEnv,omitempty"`
	// CreateSeconds is the time to create every pod and report it running;
	// RecordSeconds the time from the last pod reported running to the
	// last pod recorded (the operator's record on the pod shows the agent in
	// the current container start), and FromFirstSeconds from the first pod
	// created to the last recorded.
	CreateSeconds    float64 `json:"createSeconds"`
	RecordSeconds    float64 `json:"recordSeconds"`
	FromFirstSeconds float64 `json:"fromFirstSeconds"`
	Recorded         int     `json:"recorded"`
	// Initial are the operator's requests from the first pod created until
	// every pod was recorded; InitialStarts the container starts they
	// served (Pods).
	Initial       Requests `json:"initial"`
	InitialStarts int      `json:"initialStarts"`
	// InitialEvents and SteadyEvents are the Events the phases created, by
	// the kind of object and reason.
	InitialEvents Events `json:"initialEvents,omitempty"`
	SteadyEvents  Events `json:"steadyEvents,omitempty"`
	// Steady are the operator's requests from the first restart until every
	// restarted start was recorded; Restarts how many restarts there were,
	// RestartsRecorded how many of them were recorded, SteadySeconds how long
	// the phase lasted, and RestartLatency the time from a restart reported
	// to its start recorded (p50, p99, max, in seconds).
	Steady           Requests  `json:"steady"`
	Restarts         int       `json:"restarts"`
	RestartsRecorded int       `json:"restartsRecorded"`
	SteadySeconds    float64   `json:"steadySeconds"`
	RestartLatency   []float64 `json:"restartLatency"`
	// CPUSeconds is the operator's CPU time (user + system) from its start
	// to the end, InitialCPUSeconds the part spent in the initial phase;
	// PeakRSS its VmHWM at the end, in bytes.
	CPUSeconds        float64 `json:"cpuSeconds"`
	InitialCPUSeconds float64 `json:"initialCPUSeconds"`
	PeakRSS           uint64  `json:"peakRSS"`
	// LargestExporter names the exporter with the most bytes of JSON, as
	// a GET returns it, and LargestExporterBytes is that size.
	LargestExporter      string `json:"largestExporter"`
	LargestExporterBytes int    `json:"largestExporterBytes"`
	// Answered is how many ephemeral containers the simulated kubelet
	// answered.
	Answered int `json:"answered"`
	// Messages are a few termination messages the simulated kubelet wrote,
	// as read back from the API server.
	Messages []string `json:"messages,omitempty"`
	// OperatorExitError is how the operator ended when it did not end
	// cleanly on SIGTERM.
	OperatorExitError string `json:"operatorExitError,omitempty"`
}

// StatusWritesPerMinute is the steady phase's exporter status writes per
// minute.
func (r *Result) StatusWritesPerMinute() float64 {
	if r.SteadySeconds <= 0 {
		return 0
	}
	return r.Steady.statusWrites() / (r.SteadySeconds / 60)
}

// A phase ends once the operator has made no write for settleQuiet (its
// Events, sent in the background, and its paced status writes belong to
// the phase: longer than operator.StatusDelay), or settleLimit after its
// starts were recorded.
const (
	settleQuiet = 6 * time.Second // operator.StatusDelay is 5 s
	settleLimit = 2 * time.Minute
)

// Prepare installs the PrometheusJmxExporter CRD from the checkout at root
// into env; once per control plane.
func Prepare(ctx context.Context, env *testenv.Environment, root string) error {
	crds, err := testenv.ReadCRDs(filepath.Join(root, "deploy", "crds"))
	if err != nil {
		return err
	}
	return env.InstallCRDs(ctx, crds...)
}

// Run measures one shape on env, which Prepare has prepared: in a namespace
// of its own it creates the exporters, starts the operator, creates the
// pods and reports them running, waits for every pod to be recorded, then
// restarts containers at the steady rate and waits for those starts to be
// recorded.
func Run(ctx context.Context, env *testenv.Environment, cfg Config) (*Result, error) {
	switch {
	case cfg.Pods < 1:
		return nil, errors.New("scale: need at least one pod")
	case cfg.Shape != ShapeOne && cfg.Shape != ShapeMany:
		return nil, fmt.Errorf("scale: unknown shape %q", cfg.Shape)
	case cfg.Shape == ShapeMany && cfg.PodsPerExporter < 1:
		return nil, errors.New("scale: PodsPerExporter must be positive")
	case cfg.Operator == "" || cfg.Dir == "":
		return nil, errors.New("scale: Operator and Dir are required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Minute
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "%s [%s] %s\n", time.Now().UTC().Format("15:04:05"), cfg.Shape, fmt.Sprintf(format, args...))
		}
	}
	rc := rest.CopyConfig(env.Config())
	rc.QPS, rc.Burst = 2000, 4000 // the benchmark's own clients never wait on a client-side limit
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	jmx, err := versioned.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	ns, err := workload.Writer{Kube: kube}.Namespace(ctx, "scale-"+cfg.Shape+"-")
	if err != nil {
		return nil, err
	}
	res := &Result{Shape: cfg.Shape, Pods: cfg.Pods, OperatorEnv: cfg.OperatorEnv}
	if err := createExporters(ctx, kube, jmx, ns, cfg, res); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(cfg.Dir, "kubeconfig-"+ns)
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}

	kctx, stopKubelet := context.WithCancel(ctx)
	defer stopKubelet()
	k := newKubelet(kube, ns)
	if err := k.run(kctx); err != nil {
		return nil, err
	}
	logPath := filepath.Join(cfg.Dir, "operator-"+ns+".log")
	op, err := startOperator(ctx, cfg.Operator, kubeconfig, ns, logPath, cfg.OperatorArgs, cfg.OperatorEnv)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = op.stop()
		}
	}()
	progress("operator ready (pid %d, log %s); %d exporters in %s", op.cmd.Process.Pid, logPath, res.Exporters, ns)

	// The initial phase: every pod created and reported running.
	before, err := op.requests()
	if err != nil {
		return nil, err
	}
	cpu0, err := readProc(op.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	events0, err := eventCounts(ctx, kube, ns)
	if err != nil {
		return nil, err
	}
	first := time.Now()
	if err := createPods(ctx, kube, k, ns, cfg.Pods); err != nil {
		return nil, err
	}
	running := time.Now()
	res.CreateSeconds = running.Sub(first).Seconds()
	progress("%d pods running after %.1f s", cfg.Pods, res.CreateSeconds)
	// A phase that times out still yields its figures, over the starts
	// recorded until then (Recorded < Pods says so).
	incomplete := waitRecorded(ctx, k, op, cfg.Pods, cfg.Timeout, progress)
	if incomplete != nil && (ctx.Err() != nil || op.exited()) {
		return res, incomplete
	}
	recorded := time.Now()
	res.Recorded, _, _ = k.counts()
	res.RecordSeconds = recorded.Sub(running).Seconds()
	res.FromFirstSeconds = recorded.Sub(first).Seconds()
	// The status that reports the starts is written paced
	// (operator.StatusDelay): it belongs to the initial phase's requests.
	if incomplete == nil {
		if err := waitStatusCounts(ctx, jmx, ns, res.Recorded, cfg.Timeout); err != nil {
			return res, err
		}
	}
	after, err := op.settle(ctx, settleQuiet, settleLimit)
	if err != nil {
		return nil, err
	}
	res.Initial, res.InitialStarts = after.minus(before), res.Recorded
	events1, err := eventCounts(ctx, kube, ns)
	if err != nil {
		return nil, err
	}
	res.InitialEvents = events1.minus(events0)
	cpu1, err := readProc(op.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	res.InitialCPUSeconds = cpu1.CPUSeconds - cpu0.CPUSeconds
	if cfg.Profile {
		if err := op.saveHeap(filepath.Join(cfg.Dir, "heap-"+ns+"-recorded.pprof")); err != nil {
			return res, err
		}
	}
	if incomplete == nil {
		progress("all %d pods recorded %.1f s after the last was running", cfg.Pods, res.RecordSeconds)
	}

	// The steady phase: restarts at a steady rate.
	if cfg.RestartRate > 0 && cfg.SteadyDuration > 0 && incomplete == nil {
		steadyStart := time.Now()
		n, err := restart(ctx, kube, k, ns, cfg)
		if err != nil {
			return res, err
		}
		res.Restarts = n
		progress("%d containers restarted in %s; waiting for their records", n, time.Since(steadyStart).Round(time.Second))
		if err := waitRecorded(ctx, k, op, cfg.Pods, cfg.Timeout, progress); err != nil {
			return res, err
		}
		res.SteadySeconds = time.Since(steadyStart).Seconds()
		end, err := op.settle(ctx, settleQuiet, settleLimit)
		if err != nil {
			return nil, err
		}
		res.Steady = end.minus(after)
		events2, err := eventCounts(ctx, kube, ns)
		if err != nil {
			return nil, err
		}
		res.SteadyEvents = events2.minus(events1)
		lat, unrecorded := k.latencies(steadyStart)
		res.RestartsRecorded = len(lat)
		if unrecorded > 0 {
			return res, fmt.Errorf("scale: %d restarted containers not recorded", unrecorded)
		}
		res.RestartLatency = quantiles(lat)
	}

	if res.LargestExporter, res.LargestExporterBytes, err = largestExporter(ctx, kube, ns); err != nil {
		return res, err
	}
	if res.Messages, err = sampleMessages(ctx, kube, ns, 3); err != nil {
		return res, err
	}
	if cfg.Profile {
		if err := op.saveHeap(filepath.Join(cfg.Dir, "heap-"+ns+"-end.pprof")); err != nil {
			return res, err
		}
	}
	end, err := readProc(op.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	res.CPUSeconds, res.PeakRSS = end.CPUSeconds, end.PeakRSS
	_, res.Answered, _ = k.counts()
	stopped = true
	if err := op.stop(); err != nil {
		res.OperatorExitError = err.Error()
	}
	stopKubelet()
	if err := k.err(); err != nil {
		return res, err
	}
	return res, incomplete
}

// createExporters creates the ConfigMap and the shape's exporters.
func createExporters(ctx context.Context, kube kubernetes.Interface, jmx versioned.Interface, ns string, cfg Config, res *Result) error {
	if err := (workload.Writer{Kube: kube}).CreateConfigMap(ctx, ns); err != nil {
		return err
	}
	var exporters []*jmxv1alpha1.PrometheusJmxExporter
	if cfg.Shape == ShapeOne {
		exporters = append(exporters, exporter(ns, "all", map[string]string{"bench": "scale"}))
	} else {
		for g := range (cfg.Pods + cfg.PodsPerExporter - 1) / cfg.PodsPerExporter {
			exporters = append(exporters, exporter(ns, groupName(g), map[string]string{"bench-group": groupName(g)}))
		}
	}
	res.Exporters = len(exporters)
	return workload.ForEach(ctx, len(exporters), workload.Parallel, func(ctx context.Context, i int) error {
		_, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Create(ctx, exporters[i], metav1.CreateOptions{})
		return err
	})
}

func groupName(g int) string { return fmt.Sprintf("g-%05d", g) }

// exporter returns an exporter named name selecting the pods with labels.
func exporter(ns, name string, labels map[string]string) *jmxv1alpha1.PrometheusJmxExporter {
	return &jmxv1alpha1.PrometheusJmxExporter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: jmxv1alpha1.PrometheusJmxExporterSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Config:   &jmxv1alpha1.ExporterConfig{ConfigMapName: workload.ConfigMapName, ConfigMapKey: workload.ConfigMapKey},
			Port:     exporterPort,
		},
	}
}

// createPods creates pods 0..n-1 and reports each running, as the
// scheduler and the kubelet would.
func createPods(ctx context.Context, kube kubernetes.Interface, k *kubelet, ns string, n int) error {
	return workload.ForEach(ctx, n, workload.Parallel, func(ctx context.Context, i int) error {
		pod := workload.Pod(ns, i)
		pod.Labels["bench"] = "scale"
		pod.Labels["bench-group"] = groupName(i / 10)
		pod.Spec.NodeName = "scale-node"
		pods := kube.CoreV1().Pods(ns)
		var created *corev1.Pod
		err := retry(ctx, func() (err error) {
			created, err = pods.Create(ctx, pod, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) { // an earlier try that timed out
				created, err = pods.Get(ctx, pod.Name, metav1.GetOptions{})
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("scale: create pod %d: %w", i, err)
		}
		status := workload.RunningStatus(created, i)
		status.ContainerStatuses[0].ContainerID = "containerd://" + hashID(created.Name, "0")
		k.started(created.Name, i, status.ContainerStatuses[0].ContainerID, 0, time.Now())
		for try := 0; ; try++ {
			created.Status = status
			err := retry(ctx, func() error {
				_, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{FieldManager: "kubelet"})
				return err
			})
			if !apierrors.IsConflict(err) || try == 10 {
				if err != nil {
					return fmt.Errorf("scale: pod %d running: %w", i, err)
				}
				return nil
			}
			// A try that timed out may have written it: write it again on
			// the pod as it is now.
			if created, err = getPod(ctx, pods, pod.Name); err != nil {
				return fmt.Errorf("scale: pod %d running: %w", i, err)
			}
		}
	})
}

// waitStatusCounts waits until the exporters of ns count pods injected in
// all (status.injectedPods), polling every 250 ms for up to timeout.
func waitStatusCounts(ctx context.Context, jmx versioned.Interface, ns string, pods int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	got := 0
	for {
		list, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			got = 0
			for _, ex := range list.Items {
				got += int(ex.Status.InjectedPods)
			}
			if got >= pods {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("scale: the exporters' status counts %d of %d pods injected after %s (last error: %v)", got, pods, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond): // the poll interval of a wait with the caller's deadline
		}
	}
}

// getPod reads a pod, with retry's patience for an overloaded API server.
func getPod(ctx context.Context, pods corev1client.PodInterface, name string) (pod *corev1.Pod, err error) {
	err = retry(ctx, func() (err error) {
		pod, err = pods.Get(ctx, name, metav1.GetOptions{})
		return err
	})
	return pod, err
}

// retry calls f until it succeeds, fails for good, or has failed 10 times
// in a row, waiting a second between tries: an API server this loaded
// times requests out now and then (the benchmark's own writes, not the
// operator's, which handles its errors itself).
func retry(ctx context.Context, f func() error) error {
	for try := 1; ; try++ {
		err := f()
		transient := apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) ||
			apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err)
		if err == nil || !transient || try == 10 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

// restart restarts containers at cfg.RestartRate for cfg.SteadyDuration,
// going round the pods, and returns how many it restarted.
func restart(ctx context.Context, kube kubernetes.Interface, k *kubelet, ns string, cfg Config) (int, error) {
	interval := time.Duration(float64(time.Second) / cfg.RestartRate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	stop := time.After(cfg.SteadyDuration)
	var (
		wg    sync.WaitGroup
		n     atomic.Int64
		errMu sync.Mutex
		first error
	)
	next := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-stop:
			break loop
		case <-tick.C:
		}
		if next >= cfg.Pods*MaxRestartsPerPod {
			break
		}
		i := next
		next++
		wg.Go(func() {
			if err := restartOne(ctx, kube, k, ns, i%cfg.Pods); err != nil {
				errMu.Lock()
				if first == nil {
					first = err
				}
				errMu.Unlock()
				return
			}
			n.Add(1)
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return int(n.Load()), first
}

// restartOne reports pod i's container restarted: a new container ID,
// restartCount+1, the last state terminated, running since now.
func restartOne(ctx context.Context, kube kubernetes.Interface, k *kubelet, ns string, i int) error {
	pods := kube.CoreV1().Pods(ns)
	name := workload.PodName(i)
	for try := 0; ; try++ {
		pod, err := getPod(ctx, pods, name)
		if err != nil {
			return fmt.Errorf("scale: restart %s: %w", name, err)
		}
		cs := &pod.Status.ContainerStatuses[0]
		now := metav1.Now()
		cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 143, Reason: "Error", StartedAt: cs.State.Running.StartedAt, FinishedAt: now, ContainerID: cs.ContainerID}}
		cs.RestartCount++
		cs.ContainerID = "containerd://" + hashID(name, fmt.Sprint(cs.RestartCount))
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
		cs.Started, cs.Ready = ptr.To(true), true
		k.started(name, i, cs.ContainerID, cs.RestartCount, now.Time)
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{FieldManager: "kubelet"})
		switch {
		case err == nil:
			return nil
		case (apierrors.IsConflict(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)) && try < 20:
			continue // the operator or the kubelet wrote the pod meanwhile, or the API server was slow
		default:
			return fmt.Errorf("scale: restart %s: %w", name, err)
		}
	}
}

// waitRecorded waits until all n pods are recorded in their current
// container start.
func waitRecorded(ctx context.Context, k *kubelet, op *operatorProcess, n int, timeout time.Duration, progress func(string, ...any)) error {
	deadline := time.After(timeout)
	report := time.NewTicker(15 * time.Second)
	defer report.Stop()
	for {
		recorded, answered, changed := k.counts()
		if recorded >= n {
			return nil
		}
		if err := k.err(); err != nil {
			return err
		}
		if op.exited() {
			return fmt.Errorf("scale: the operator exited (%v) with %d of %d pods recorded", op.waitErr, recorded, n)
		}
		select {
		case <-changed:
		case <-report.C:
			progress("%d of %d pods recorded, %d ephemeral containers answered", recorded, n, answered)
		case <-deadline:
			return fmt.Errorf("scale: %d of %d pods recorded after %s", recorded, n, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// largestExporter lists the exporters and GETs the largest one, returning
// its name and the bytes of JSON that GET returned.
func largestExporter(ctx context.Context, kube kubernetes.Interface, ns string) (string, int, error) {
	base := "/apis/" + jmxv1alpha1.SchemeGroupVersion.String() + "/namespaces/" + ns + "/prometheusjmxexporters"
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath(base).SetHeader("Accept", "application/json").DoRaw(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("scale: list exporters: %w", err)
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", 0, err
	}
	name, size := "", -1
	for _, item := range list.Items {
		var meta struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(item, &meta); err != nil {
			return "", 0, err
		}
		if len(item) > size {
			name, size = meta.Metadata.Name, len(item)
		}
	}
	if name == "" {
		return "", 0, errors.New("scale: no exporters")
	}
	one, err := kube.CoreV1().RESTClient().Get().AbsPath(base, name).SetHeader("Accept", "application/json").DoRaw(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("scale: get exporter %s: %w", name, err)
	}
	return name, len(one), nil
}

// sampleMessages returns the termination messages of the ephemeral
// containers of the first n pods, read back from the API server.
func sampleMessages(ctx context.Context, kube kubernetes.Interface, ns string, n int) ([]string, error) {
	var out []string
	for i := range n {
		pod, err := kube.CoreV1().Pods(ns).Get(ctx, workload.PodName(i), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil {
			return nil, err
		}
		for _, st := range pod.Status.EphemeralContainerStatuses {
			if st.State.Terminated != nil {
				out = append(out, st.State.Terminated.Message)
			}
		}
	}
	return out, nil
}

// quantiles returns p50, p99 and the maximum of d, in seconds.
func quantiles(d []time.Duration) []float64 {
	if len(d) == 0 {
		return nil
	}
	slices.Sort(d)
	at := func(q float64) float64 { return d[min(len(d)-1, int(q*float64(len(d))))].Seconds() }
	return []float64{at(0.5), at(0.99), d[len(d)-1].Seconds()}
}
