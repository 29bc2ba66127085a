package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

// Pod annotations the operator writes. It merge-patches them; it never
// changes anything else in a pod.
const (
	// AnnotationAgents holds the operator's record of the pod (PodRecord as
	// JSON): which container starts got the agent, on which ports, or why not.
	AnnotationAgents = "jmx.handlerkit.dev/agents"
	// AnnotationPorts lists the ports of every injected JVM in the pod,
	// comma-separated, lowest first.
	AnnotationPorts = "jmx.handlerkit.dev/ports"
	// AnnotationScrape, AnnotationPort and AnnotationPath are the
	// prometheus.io annotations that Prometheus' kubernetes-pods scrape job
	// (as the community Helm chart writes it) honours. Port names the first
	// JVM's port; a pod with several JVMs lists all in AnnotationPorts.
	AnnotationScrape = "prometheus.io/scrape"
	AnnotationPort   = "prometheus.io/port"
	AnnotationPath   = "prometheus.io/path"
	// AnnotationExporter names the exporter whose agents serve in the pod.
	// The exporter's PodMonitor keeps only the pods that name it.
	AnnotationExporter = "jmx.handlerkit.dev/exporter"
	// AnnotationJVMPrefix starts one annotation per injected JVM,
	// jmx.handlerkit.dev/jvm-<i> = "<container>:<port>", i counting from 0 in
	// the order of AnnotationPorts. Endpoint i of the exporter's PodMonitor
	// scrapes JVM i.
	AnnotationJVMPrefix = "jmx.handlerkit.dev/jvm-"
	// AnnotationDiscoveryAnchor names the one target that Prometheus'
	// Kubernetes pod discovery finds for the pod which the PodMonitor keeps:
	// "<container>;<port>;<protocol>", the pod's first container and its
	// first declared port and protocol, both empty when it declares none.
	// Discovery finds one target per declared port and one per container
	// without ports; keeping exactly one makes one scrape per JVM, whatever
	// ports the pod declares.
	AnnotationDiscoveryAnchor = "jmx.handlerkit.dev/discovery-anchor"
)

// promAnnotations are the prometheus.io annotations the operator writes on a
// pod that has none of its own (PodRecord.Written says which it wrote).
var promAnnotations = []string{AnnotationScrape, AnnotationPort, AnnotationPath}

// promPrefix starts the annotations Prometheus' kubernetes-pods job reads; a
// pod that carries any of its own keeps them, and the operator sets none.
const promPrefix = "prometheus.io/"

// jmxAnnotations are the operator's own jmx.handlerkit.dev annotations
// besides the record and the per-JVM ones: written while the pod has a JVM
// with the agent, removed when it has none or leaves the exporter.
var jmxAnnotations = []string{AnnotationPorts, AnnotationExporter, AnnotationDiscoveryAnchor}

// PodRecord is the operator's record of one pod, kept in AnnotationAgents so
// that it survives operator restarts and is visible with kubectl.
type PodRecord struct {
	// Exporter is the name of the PrometheusJmxExporter (in the pod's
	// namespace) that injected the pod.
	Exporter string `json:"exporter"`
	// Containers maps a container name to what happened to its current (or
	// last seen) start.
	Containers map[string]ContainerRecord `json:"containers,omitempty"`
	// Written are the prometheus.io annotations the operator set on the pod
	// (and so may change and remove). Kept are the pod's own prometheus.io
	// annotations, found before the operator wrote any: the operator leaves
	// them as they are and sets none of its own (its PodMonitor, and the
	// jmx.handlerkit.dev annotations, still name the agents). Keeping both
	// in the record makes them survive operator restarts.
	Written []string `json:"written,omitempty"`
	Kept    []string `json:"kept,omitempty"`
}

// ContainerRecord is what happened to one container start. It applies only
// while the container's ID is ContainerID: a restarted container (new ID)
// lost its agent with its old process and is injected again.
type ContainerRecord struct {
	// ContainerID is the container instance (runtime://id).
	ContainerID string `json:"containerID"`
	// Port is the spec.port the container was injected with.
	Port int32 `json:"port,omitempty"`
	// ConfigHash identifies the config the agents read (sha256, hex prefix).
	ConfigHash string `json:"configHash,omitempty"`
	// InjectedAt is when the first agent was loaded.
	InjectedAt *metav1.Time `json:"injectedAt,omitempty"`
	// JVMs are the JVMs that have the agent.
	JVMs []JVMRecord `json:"jvms,omitempty"`
	// NoJVM is true when no (selected) JVM runs in the container. It is not
	// final: the container start is looked at again for a JVM that starts
	// late, at NextLookAt, unless LooksEnded says why not.
	NoJVM bool `json:"noJVM,omitempty"`
	// Looks counts the looks for a JVM in this container start that found
	// none (a record with NoJVM).
	Looks int `json:"looks,omitempty"`
	// NextLookAt is when the container start is looked at again for a JVM
	// that started late (a record with NoJVM).
	NextLookAt *metav1.Time `json:"nextLookAt,omitempty"`
	// LooksEnded says why a container start without a JVM is no longer
	// looked at (the pod's budget of ephemeral containers is kept for its
	// next starts); its next start is looked at as usual.
	LooksEnded string `json:"looksEnded,omitempty"`
	// Failure is a permanent failure of this container start. It is not
	// retried while the container start, the exporter's generation and the
	// config are the ones it was met with (Generation, ConfigHash): asking
	// again without a change gets the same answer, or could harm the JVM.
	Failure *Failure `json:"failure,omitempty"`
	// Generation is the exporter's metadata.generation of the last load,
	// reload or failure recorded here (0 in records of earlier releases).
	Generation int64 `json:"generation,omitempty"`
	// ConfiguredAt is when the agents last took a new config by reload.
	ConfiguredAt *metav1.Time `json:"configuredAt,omitempty"`
	// Attempts counts the attempts of this container start that failed
	// transiently, for the same generation and config; LastError is the
	// last one's cause. Past the operator's bound (the same for both
	// strategies) the start is recorded as TooManyAttempts.
	Attempts  int    `json:"attempts,omitempty"`
	LastError string `json:"lastError,omitempty"`
	// AttemptedAt is when the last transient attempt ended: it may have
	// reached the JVM, so a JVM that ends soon after it opens the breaker as
	// after a load.
	AttemptedAt *metav1.Time `json:"attemptedAt,omitempty"`
	// Rejected is the last config the agents refused on reload (they keep
	// serving ConfigHash); it is not offered again until the config changes.
	Rejected *Rejection `json:"rejected,omitempty"`
	// Reloads counts the reloads of a new config on this container start
	// that failed transiently. Past the operator's bound (the one of loads)
	// that config is Rejected with reason TooManyAttempts.
	Reloads *ReloadAttempts `json:"reloads,omitempty"`
	// Note is the agents' remark on the config in force, such as a changed
	// httpServer section that takes effect at the JVM's next start.
	Note string `json:"note,omitempty"`
	// InjectedBy is AtStart when the container's JVM got the agent at its
	// start (the pod's atstart.Record names the container): the operator
	// never attached to it and copies here only what the scrape annotations
	// need (the container start, its port as the one JVM, the config it was
	// given, InjectedAt as the container's start). Empty means Attach.
	InjectedBy jmxv1alpha1.InjectedBy `json:"injectedBy,omitempty"`
}

// injectedBy is how the record's agents got into their JVMs.
func injectedBy(c ContainerRecord) jmxv1alpha1.InjectedBy {
	if c.atStart() {
		return jmxv1alpha1.InjectedByAtStart
	}
	return jmxv1alpha1.InjectedByAttach
}

// atStart says whether the record is of an agent given at start, which the
// operator never loads, reloads or counts as a load of its own.
func (c ContainerRecord) atStart() bool {
	return c.InjectedBy == jmxv1alpha1.InjectedByAtStart
}

// Rejection is a config an agent refused on reload.
type Rejection struct {
	// ConfigHash identifies the refused config (as ContainerRecord.ConfigHash).
	ConfigHash string `json:"configHash"`
	// Reason is ConfigRejected when the agent refused the config, or why
	// nothing ran (EphemeralContainerBudgetExhausted, PatchRefused, ...).
	Reason string `json:"reason,omitempty"`
	// Message is the agent's (the collector's) message.
	Message string `json:"message,omitempty"`
}

// ReloadAttempts are the transiently failed reloads of one config on one
// container start.
type ReloadAttempts struct {
	// ConfigHash identifies the config (as ContainerRecord.ConfigHash).
	ConfigHash string `json:"configHash"`
	// Attempts is how many reloads of it failed; LastError is the last
	// one's cause.
	Attempts  int    `json:"attempts"`
	LastError string `json:"lastError,omitempty"`
}

// reloadAttempts is how many reloads of the config with hash failed
// transiently on the record's container start.
func (c ContainerRecord) reloadAttempts(hash string) (int, string) {
	if c.Reloads == nil || c.Reloads.ConfigHash != hash {
		return 0, ""
	}
	return c.Reloads.Attempts, c.Reloads.LastError
}

// settled says whether the record holds an outcome of its container start
// (the agent loaded, no JVM, or a permanent failure), rather than only
// transient attempts.
func (c ContainerRecord) settled() bool {
	return c.Failure != nil || c.NoJVM || len(c.JVMs) > 0
}

// loadedAt is when the record's agents last took a config: their load, or
// their last reload.
func (c ContainerRecord) loadedAt() time.Time {
	var t time.Time
	if c.InjectedAt != nil {
		t = c.InjectedAt.Time
	}
	if c.ConfiguredAt != nil && c.ConfiguredAt.After(t) {
		t = c.ConfiguredAt.Time
	}
	return t
}

// JVMRecord is one injected JVM.
type JVMRecord struct {
	// PID is the JVM's pid inside its container.
	PID int `json:"pid"`
	// Main is the JVM's main class or jar.
	Main string `json:"main,omitempty"`
	// Port is where its agent serves /metrics.
	Port int32 `json:"port"`
	// StartedAt is when the JVM process started, when known.
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
}

// Failure is a named, permanent failure.
type Failure struct {
	// Reason is a CamelCase reason (AttachDisabled, PortInUse, ...).
	Reason string `json:"reason"`
	// Message says what happened and what to fix.
	Message string `json:"message,omitempty"`
}

// readRecord decodes the pod's record; a missing or unreadable record is an
// empty one (an unreadable record is rewritten on the next injection).
func readRecord(pod *corev1.Pod) PodRecord {
	var rec PodRecord
	if raw, ok := pod.Annotations[AnnotationAgents]; ok {
		_ = json.Unmarshal([]byte(raw), &rec)
	}
	if rec.Containers == nil {
		rec.Containers = map[string]ContainerRecord{}
	}
	return rec
}

// current returns the record of container's current start, if any.
func (r PodRecord) current(container, containerID string) (ContainerRecord, bool) {
	c, ok := r.Containers[container]
	if !ok || containerID == "" || c.ContainerID != containerID {
		return ContainerRecord{}, false
	}
	return c, true
}

// written returns the prometheus.io annotations the operator set on pod. A
// record of an earlier release, which tracked neither Written nor Kept,
// wrote them whenever it wrote AnnotationExporter.
func (r PodRecord) written(pod *corev1.Pod) []string {
	if r.Written != nil || r.Kept != nil {
		return r.Written
	}
	if _, ok := pod.Annotations[AnnotationExporter]; !ok {
		return nil
	}
	var out []string
	for _, k := range promAnnotations {
		if _, ok := pod.Annotations[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

// ownPromAnnotations are the pod's prometheus.io annotations that the
// operator did not write, sorted.
func ownPromAnnotations(pod *corev1.Pod, written []string) []string {
	var out []string
	for k := range pod.Annotations {
		if strings.HasPrefix(k, promPrefix) && !slices.Contains(written, k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// annotations renders the record and the scrape annotations derived from it
// for pod (its spec names the discovery anchor; its annotations, the
// per-JVM annotations of an earlier record that no longer apply, and the
// pod's own prometheus.io annotations, which are never touched). It returns
// the record as written, with Written and Kept updated.
func (r PodRecord) annotations(pod *corev1.Pod) (map[string]*string, PodRecord, error) {
	type jvm struct {
		container string
		port      int32
	}
	var jvms []jvm
	for name, c := range r.Containers {
		for _, j := range c.JVMs {
			jvms = append(jvms, jvm{name, j.Port})
		}
	}
	sort.Slice(jvms, func(i, j int) bool {
		return jvms[i].port < jvms[j].port || jvms[i].port == jvms[j].port && jvms[i].container < jvms[j].container
	})
	out := map[string]*string{}
	// Per-JVM annotations beyond the current count go.
	for k := range pod.Annotations {
		if i, ok := jvmIndex(k); ok && i >= len(jvms) {
			out[k] = nil
		}
	}
	written := r.written(pod)
	if len(jvms) == 0 {
		for _, k := range append(slices.Clone(jmxAnnotations), written...) {
			out[k] = nil
		}
		r.Written, r.Kept = nil, nil
		return r.render(out)
	}
	list := make([]string, len(jvms))
	for i, j := range jvms {
		list[i] = strconv.Itoa(int(j.port))
		out[AnnotationJVMPrefix+strconv.Itoa(i)] = ptrTo(j.container + ":" + list[i])
	}
	out[AnnotationPorts] = ptrTo(strings.Join(list, ","))
	out[AnnotationExporter] = ptrTo(r.Exporter)
	out[AnnotationDiscoveryAnchor] = ptrTo(discoveryAnchor(pod))
	if own := ownPromAnnotations(pod, written); len(written) == 0 && len(own) > 0 {
		// The pod's own scrape annotations describe its own target: the
		// operator's would mix with them, so it sets none.
		r.Written, r.Kept = nil, own
		return r.render(out)
	}
	out[AnnotationScrape] = ptrTo("true")
	out[AnnotationPort] = ptrTo(list[0])
	out[AnnotationPath] = ptrTo("/metrics")
	r.Written, r.Kept = slices.Clone(promAnnotations), nil
	return r.render(out)
}

// render adds the record itself to out.
func (r PodRecord) render(out map[string]*string) (map[string]*string, PodRecord, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, r, err
	}
	out[AnnotationAgents] = ptrTo(string(b))
	return out, r, nil
}

// keptNote says, for a pod whose own prometheus.io annotations the operator
// left alone, why the operator set none.
func keptNote(pod string, rec PodRecord) string {
	if len(rec.Kept) == 0 {
		return ""
	}
	return fmt.Sprintf("pod %s has its own %s annotations, which the operator keeps: it set no prometheus.io annotations of its own there "+
		"(the agents are named in %s, and the exporter's PodMonitor, when the cluster has one, scrapes them)",
		pod, strings.Join(rec.Kept, ", "), AnnotationPorts)
}

// jvmIndex parses the index of an AnnotationJVMPrefix annotation.
func jvmIndex(key string) (int, bool) {
	rest, ok := strings.CutPrefix(key, AnnotationJVMPrefix)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil && i >= 0
}

// discoveryAnchor is the value of AnnotationDiscoveryAnchor for pod: its first
// container's name, port and protocol as Prometheus' pod discovery labels
// them (__meta_kubernetes_pod_container_name, _port_number and
// _port_protocol, joined with ";"; absent labels are empty).
func discoveryAnchor(pod *corev1.Pod) string {
	if len(pod.Spec.Containers) == 0 {
		return ""
	}
	c := pod.Spec.Containers[0]
	if len(c.Ports) == 0 {
		return c.Name + ";;"
	}
	return c.Name + ";" + strconv.Itoa(int(c.Ports[0].ContainerPort)) + ";" + string(c.Ports[0].Protocol)
}

func ptrTo[T any](v T) *T { return &v }

// updateRecord reads the pod from the API server, applies change to its
// record and merge-patches the annotations, with the pod's resourceVersion as
// a precondition so that concurrent writers never lose each other's record.
// It retries on conflicts (patchAnnotations), and returns the record as
// written. A pod that was replaced (other UID) or deleted is left alone (an
// empty record).
func updateRecord(ctx context.Context, client kubernetes.Interface, namespace, name string, uid types.UID, change func(*PodRecord)) (PodRecord, error) {
	var written PodRecord
	patched, err := patchAnnotations(ctx, client, namespace, name, uid, func(pod *corev1.Pod) (any, error) {
		rec := readRecord(pod)
		change(&rec)
		ann, rec, err := rec.annotations(pod)
		written = rec
		return ann, err
	})
	if !patched {
		written = PodRecord{}
	}
	var re *podReadError
	if errors.As(err, &re) {
		err = re.err
	}
	return written, err
}

// clearAnnotations removes the operator's annotations from a pod that
// exporter injected: its record, its jmx.handlerkit.dev annotations and
// exactly the prometheus.io annotations it wrote (the record says which),
// never the pod's own. It reads the pod live and patches with its
// resourceVersion as a precondition (patchAnnotations), so that a record
// written meanwhile is not misread. It reports whether it changed the pod.
func clearAnnotations(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, exporter string) (bool, error) {
	if _, ok := pod.Annotations[AnnotationAgents]; !ok {
		return false, nil
	}
	patched, err := patchAnnotations(ctx, client, pod.Namespace, pod.Name, pod.UID, func(live *corev1.Pod) (any, error) {
		if _, ok := live.Annotations[AnnotationAgents]; !ok {
			return nil, nil
		}
		rec := readRecord(live)
		if rec.Exporter != exporter {
			return nil, nil
		}
		ann := map[string]any{AnnotationAgents: nil}
		for _, k := range append(slices.Clone(jmxAnnotations), rec.written(live)...) {
			ann[k] = nil
		}
		for k := range live.Annotations {
			if _, ok := jvmIndex(k); ok {
				ann[k] = nil
			}
		}
		return ann, nil
	})
	var re *podReadError
	switch {
	case errors.As(err, &re):
		return false, err
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("clear the annotations of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return patched, nil
}

// patchAnnotations is the operator's one loop that writes a pod's
// annotations: it reads the pod live and, while it is still the pod with
// uid, merge-patches the annotations that annotate returns for it (nil:
// nothing to write), with the pod's resourceVersion as a precondition; on a
// conflict it reads again and retries (at most 10 times, waiting 10 ms
// longer each time). It says whether it patched. A pod that is gone or was
// replaced is left alone; an error reading it is a *podReadError.
func patchAnnotations(ctx context.Context, client kubernetes.Interface, namespace, name string, uid types.UID,
	annotate func(*corev1.Pod) (any, error)) (bool, error) {
	pods := client.CoreV1().Pods(namespace)
	for try := 0; ; try++ {
		live, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, &podReadError{namespace: namespace, name: name, err: err}
		}
		if live.UID != uid {
			return false, nil
		}
		ann, err := annotate(live)
		if err != nil || ann == nil {
			return false, err
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": live.ResourceVersion, "annotations": ann}})
		if err != nil {
			return false, err
		}
		_, err = pods.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
		if apierrors.IsConflict(err) && try < 10 {
			time.Sleep(time.Duration(10*(try+1)) * time.Millisecond)
			continue
		}
		return err == nil, err
	}
}

// podReadError is patchAnnotations' failure to read the pod.
type podReadError struct {
	namespace, name string
	err             error
}

func (e *podReadError) Error() string {
	return fmt.Sprintf("read pod %s/%s: %v", e.namespace, e.name, e.err)
}

func (e *podReadError) Unwrap() error { return e.err }
