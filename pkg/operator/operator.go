// Package operator is the PrometheusJmxExporter operator's handler: it decides
// which containers of which pods get the Prometheus JMX exporter agent, asks
// package inject to load it, records the outcome on the pods, and reports it
// in each exporter's status, in Events and in metrics.
//
// Data flows one way: Pod, ConfigMap and exporter events are mapped to
// exporter keys (through the caches, never a live List per event); the
// handler of an exporter validates it, plans injections and starts them on a
// bounded pool (one job per pod at a time); a finished job records its outcome
// in the pod's annotations and wakes the exporter again, whose handler then
// writes the status from the pods' records. The records live on the pods, so
// an operator that restarts picks up exactly where its predecessor stopped.
package operator

import (
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// Watch names. Pod and ConfigMap events are mapped to exporter keys, and so
// are those of the operator's PodMonitors (watchPodMonitors). The exporters
// of namespaces the operator does not serve have a watch of their own
// (watchUnserved).
const (
	watchExporters  = "exporters"
	watchPods       = "pods"
	watchConfigMaps = "configmaps"
)

// Finalizer is put on every exporter; the operator removes its annotations
// from the pods before it lets the exporter go.
const Finalizer = "jmx.handlerkit.dev/cleanup"

// fieldManager names the operator's writes.
const fieldManager = "prometheus-jmx-exporter-operator"

// indexConfigMap indexes exporters by the ConfigMap they read.
const indexConfigMap = "configmap"

// indexRecordedBy indexes pods by the exporter their record names.
const indexRecordedBy = "recorded-by"

// Defaults of Options.
const (
	DefaultInjectionTimeout = 2 * time.Minute
	DefaultParallelism      = 8
	// DefaultJVMWait is how long after a container starts the operator waits
	// for a JVM to appear in it before it records that there is none.
	DefaultJVMWait = 60 * time.Second
	// DefaultBreakerWindow is how long after a load a JVM's end trips the
	// exporter's circuit breaker, and how long a change (of the exporter's
	// spec or config) is tried on one container before the others.
	DefaultBreakerWindow = time.Minute
	// DefaultReplacementWait bounds how long restartOnRefusal waits for an
	// evicted pod's replacement to appear (after the pod is gone) and to
	// run and be ready (after it was created) before it stops evicting.
	DefaultReplacementWait = 5 * time.Minute
	// DefaultMaxAttempts bounds the transiently failed attempts on one
	// container start, with either strategy.
	DefaultMaxAttempts = inject.DefaultMaxAttempts
	// DefaultEphemeralContainerBudget is how many ephemeral containers the
	// operator adds to one pod in the pod's whole life.
	DefaultEphemeralContainerBudget = inject.DefaultBudget
)

// Options configure the operator. The zero value of each field takes its
// default.
type Options struct {
	// Namespaces to watch: "" for all, one name, or a comma-separated list.
	Namespaces string
	// DefaultStrategy applies to exporters that do not set
	// spec.injection.strategy; default EphemeralContainer.
	DefaultStrategy jmxv1alpha1.InjectionStrategy
	// DisabledStrategies are refused (the deployment grants no RBAC for
	// them); an exporter asking for one gets a condition.
	DisabledStrategies []jmxv1alpha1.InjectionStrategy
	// AgentImage, AgentPath and AttachHelperPath are the agent image and the
	// paths in it. AgentImage serves exporters that leave spec.agent.image
	// empty, and is always allowed; the paths are the only ones ever used:
	// an exporter that names other paths is refused (AgentPathNotAllowed).
	AgentImage, AgentPath, AttachHelperPath string
	// AllowedAgentImages are the other images an exporter may name in
	// spec.agent.image, as exact references. Any image that is neither
	// AgentImage nor listed here is refused (AgentImageNotAllowed) and
	// nothing runs in any pod. Default: none (only AgentImage).
	AllowedAgentImages []string
	// PullPolicy is the ephemeral containers' image pull policy (default
	// IfNotPresent).
	PullPolicy corev1.PullPolicy
	// LocalAttachHelper and LocalAgentJar are the operator's own copies,
	// which the Exec strategy streams into containers. Defaults: the agent
	// image's paths (the operator's image is the agent image).
	LocalAttachHelper, LocalAgentJar string
	// InjectionTimeout bounds one injection of one container.
	InjectionTimeout time.Duration
	// Parallelism is how many injection jobs hold a slot at once: reading
	// the pod, adding the ephemeral container or opening the exec, writing
	// the record. A job waiting for jmx-attach to find a JVM (up to
	// JVMWait) or for the pod cache holds none. Slots go round-robin
	// between exporters with jobs queued.
	Parallelism int
	// JVMWait is how long after a container's start a JVM may take to
	// appear.
	JVMWait time.Duration
	// LateJVMInterval is the wait before a container start in which no JVM
	// appeared within JVMWait is looked at again, doubling after each look
	// up to maxLateJVMInterval; 0 means DefaultLateJVMInterval, a negative
	// value turns these looks off (a restart is still looked at).
	LateJVMInterval time.Duration
	// Resync is how often every exporter is handled again even when nothing
	// changed (0: never; the command's default is 10m). Handling is
	// level-driven, so a resync only repeats what the state calls for: it
	// never retries a permanent failure.
	Resync time.Duration
	// BreakerWindow is how long after a load a JVM's end trips the
	// exporter's circuit breaker; a change of the exporter's spec or config
	// is tried on one container, which must run this long, before the
	// others get it. Default DefaultBreakerWindow.
	BreakerWindow time.Duration
	// ReplacementWait bounds how long spec.injection.restartOnRefusal waits
	// for an evicted pod's replacement to appear (after the evicted pod is
	// gone) and to run and be ready (after it was created); past it the
	// operator stops evicting that exporter's pods until its spec changes.
	// Default DefaultReplacementWait.
	ReplacementWait time.Duration
	// MaxAttempts bounds the transiently failed attempts on one container
	// start, with either strategy, and the transiently failed reloads of
	// one config on one container start. Default DefaultMaxAttempts.
	MaxAttempts int
	// EphemeralContainerBudget is how many ephemeral containers the
	// operator adds to one pod in its whole life, injections and
	// reconfigurations together. Default DefaultEphemeralContainerBudget.
	EphemeralContainerBudget int
	// Client is the clientset for pods/ephemeralcontainers and pods/exec;
	// default: the Operator's.
	Client kubernetes.Interface
	// Strategies replaces the built-in strategies (tests).
	Strategies map[jmxv1alpha1.InjectionStrategy]inject.Strategy
	// DisablePodMonitors stops the operator from keeping a PodMonitor per
	// exporter. By default it keeps one when the cluster serves
	// monitoring.coreos.com/v1 PodMonitors when Setup runs (a CRD installed
	// later is used after the operator restarts).
	DisablePodMonitors bool
	// ReportUnserved, when Namespaces names namespaces (not all), watches
	// the exporters of every other namespace read-only and sets
	// NotServed=True and Ready=False on each, naming the served namespaces
	// (watchUnserved). It needs get, list and watch on exporters and update
	// on their status cluster-wide (a ClusterRole); the operator never acts
	// on those exporters' pods.
	ReportUnserved bool
	// PodMonitorLabels are added to the labels of every PodMonitor, for a
	// Prometheus whose podMonitorSelector asks for them (such as
	// kube-prometheus-stack's release=<name>).
	PodMonitorLabels map[string]string
	// AtStartDelivery is how AtStartInput has the webhook deliver the agent
	// jar to pods injected at start: atstart.DeliveryImageVolume (default)
	// or atstart.DeliveryInitContainer, for clusters without image volumes.
	AtStartDelivery atstart.Delivery
	// NoWebhook says that the operator serves no admission webhook
	// (--webhook=off, or its RBAC for the webhook is missing), so no pod
	// gets the agent at start: exporters with spec.injection.mode AtStart
	// or Both get Degraded=True, reason WebhookDisabled, and
	// restartOnRefusal evicts nothing (a recreated pod would come back
	// without the agent, and be refused again).
	NoWebhook bool
	// ContainerLogs reads the start of the logs of containers given the
	// agent at start, whose agent's one line says whether it serves or why
	// it refused (docs/atstart.md). Default: get pods/log through Client.
	ContainerLogs LogReader
}

// Scheme returns a scheme with the built-in kinds and PrometheusJmxExporter,
// for sdk.WithScheme.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := jmxv1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Setup registers the operator's watches and handler on op. op must have
// been built with Scheme().
func Setup(op *sdk.Operator, o Options) (*Reconciler, error) {
	if op == nil {
		return nil, errors.New("operator: nil sdk.Operator")
	}
	o = o.withDefaults()
	if o.Client == nil {
		o.Client = op.Clientset()
	}
	if o.ContainerLogs == nil {
		o.ContainerLogs = podLogs{client: o.Client}
	}
	r := newReconciler(op, o)
	if err := r.watch(op); err != nil {
		return nil, err
	}
	return r, nil
}

// newReconciler builds the Reconciler of op with the options o (defaults
// filled in): its strategies, and whether it keeps PodMonitors.
func newReconciler(op *sdk.Operator, o Options) *Reconciler {
	r := &Reconciler{
		op:         op,
		opts:       o,
		read:       query.For(op),
		configMaps: newConfigMaps(query.For(op)),
		pool:       inject.NewPool(o.Parallelism),
		metrics:    newMetrics(op.Registerer()),
		conditions: newConditionMetric(op.Registerer()),
		retries:    newRetries(),
		agentLines: newAgentLineReads(),
	}
	r.pacer.memory = &r.memory // the exporters' pace is in their exporterMemory
	r.strategies = o.Strategies
	if r.strategies == nil {
		r.strategies = map[jmxv1alpha1.InjectionStrategy]inject.Strategy{
			jmxv1alpha1.InjectionEphemeralContainer: &inject.EphemeralContainer{Client: o.Client,
				MaxAttempts: o.MaxAttempts, Budget: o.EphemeralContainerBudget},
			jmxv1alpha1.InjectionExec: &inject.Exec{Config: op.RESTConfig(), Client: o.Client,
				AttachHelper: o.LocalAttachHelper, AgentJar: o.LocalAgentJar},
		}
	}
	for _, d := range o.DisabledStrategies {
		delete(r.strategies, d)
	}
	for _, s := range r.strategies {
		if s != nil {
			r.metrics.initStrategies(s.Name())
		}
	}
	if !o.DisablePodMonitors {
		served, err := podMonitorsServed(op.Clientset())
		if err != nil {
			op.Logger().Warnf("operator: %v; no PodMonitors are kept until the operator restarts", err)
		}
		r.podMonitors = served
	}
	return r
}

// watch registers the Reconciler's watches on op: the exporters (handled
// by r), the pods and ConfigMaps (mapped to their exporters), the exporters
// of unserved namespaces (--report-unserved), and the PodMonitors when the
// cluster serves them.
func (r *Reconciler) watch(op *sdk.Operator) error {
	o := r.opts
	ns := o.Namespaces
	if err := op.Watch(jmxv1alpha1.SchemeGroupVersion.String(), "PrometheusJmxExporter", ns, o.Resync,
		sdk.WithName(watchExporters), sdk.WithHandler(r),
		sdk.WithIndex(indexConfigMap, configMapIndex)); err != nil {
		return fmt.Errorf("operator: watch exporters: %w", err)
	}
	if err := op.Watch("v1", "Pod", ns, 0,
		sdk.WithName(watchPods), sdk.WithTransform(trimPod), sdk.WithIndex(indexRecordedBy, recordedByIndex),
		sdk.WithMapTo(watchExporters, r.exportersOfPod)); err != nil {
		return fmt.Errorf("operator: watch pods: %w", err)
	}
	// ConfigMaps: identities only (configMaps holds the data of those that
	// exporters read).
	if err := op.Watch("v1", "ConfigMap", ns, 0,
		sdk.WithName(watchConfigMaps), sdk.WithMetadataOnly(), sdk.WithTransform(configMapIdentity),
		sdk.WithMapTo(watchExporters, r.exportersOfConfigMap)); err != nil {
		return fmt.Errorf("operator: watch configmaps: %w", err)
	}
	if served := servedNamespaces(ns); len(served) > 0 && o.ReportUnserved {
		if err := op.Watch(jmxv1alpha1.SchemeGroupVersion.String(), "PrometheusJmxExporter", "", 0,
			sdk.WithName(watchUnserved), sdk.WithFieldSelector(unservedSelector(served)),
			sdk.WithHandler(&unserved{served: served})); err != nil {
			return fmt.Errorf("operator: watch exporters of unserved namespaces: %w", err)
		}
		op.Logger().Infof("operator: exporters outside %s get NotServed=True (--report-unserved)", strings.Join(served, ", "))
	}
	if r.podMonitors {
		if err := op.Watch(podMonitorGVK.GroupVersion().String(), podMonitorGVK.Kind, ns, 0,
			sdk.WithName(watchPodMonitors),
			sdk.WithOwnerOf(jmxv1alpha1.SchemeGroupVersion.String(), "PrometheusJmxExporter")); err != nil {
			return fmt.Errorf("operator: watch podmonitors: %w", err)
		}
		op.Logger().Infof("operator: the cluster serves %s PodMonitors: one is kept per exporter", podMonitorGVK.GroupVersion())
	} else if !o.DisablePodMonitors {
		op.Logger().Infof("operator: the cluster serves no %s PodMonitors: none are kept (pods are annotated for Prometheus either way); restart the operator after installing the CRD", podMonitorGVK.GroupVersion())
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.DefaultStrategy == "" {
		o.DefaultStrategy = jmxv1alpha1.DefaultInjectionStrategy
	}
	if o.AgentImage == "" {
		o.AgentImage = jmxv1alpha1.DefaultAgentImage
	}
	if o.AgentPath == "" {
		o.AgentPath = jmxv1alpha1.DefaultAgentPath
	}
	if o.AttachHelperPath == "" {
		o.AttachHelperPath = jmxv1alpha1.DefaultAttachHelperPath
	}
	if o.PullPolicy == "" {
		o.PullPolicy = corev1.PullIfNotPresent
	}
	if o.LocalAttachHelper == "" {
		o.LocalAttachHelper = jmxv1alpha1.DefaultAttachHelperPath
	}
	if o.LocalAgentJar == "" {
		o.LocalAgentJar = jmxv1alpha1.DefaultAgentPath
	}
	if o.InjectionTimeout <= 0 {
		o.InjectionTimeout = DefaultInjectionTimeout
	}
	if o.Parallelism <= 0 {
		o.Parallelism = DefaultParallelism
	}
	if o.JVMWait <= 0 {
		o.JVMWait = DefaultJVMWait
	}
	if o.LateJVMInterval == 0 {
		o.LateJVMInterval = DefaultLateJVMInterval
	}
	if o.BreakerWindow <= 0 {
		o.BreakerWindow = DefaultBreakerWindow
	}
	if o.ReplacementWait <= 0 {
		o.ReplacementWait = DefaultReplacementWait
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.EphemeralContainerBudget <= 0 {
		o.EphemeralContainerBudget = DefaultEphemeralContainerBudget
	}
	if o.AtStartDelivery == "" {
		o.AtStartDelivery = atstart.DeliveryImageVolume
	}
	return o
}

// configMapIndex indexes an exporter under the name of the ConfigMap it reads.
func configMapIndex(obj runtime.Object) ([]string, error) {
	ex, ok := obj.(*jmxv1alpha1.PrometheusJmxExporter)
	if !ok || ex.Spec.Config == nil || ex.Spec.Config.ConfigMapName == "" {
		return nil, nil
	}
	return []string{ex.Spec.Config.ConfigMapName}, nil
}

// recordedByIndex indexes a pod under the name of the exporter its record
// names, so that a look at an exporter finds the pods that left its
// selector among its own pods, not among every pod of the namespace.
func recordedByIndex(obj runtime.Object) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	if _, ok := pod.Annotations[AnnotationAgents]; !ok {
		return nil, nil
	}
	if name := readRecord(pod).Exporter; name != "" {
		return []string{name}, nil
	}
	return nil, nil
}

// trimPod keeps only what the operator reads of a pod, so that the pod cache
// of a large cluster stays small: identity, labels, annotations, owner
// references (restartOnRefusal evicts only pods that have a controller), the
// containers' names and security contexts, and the status fields that say
// what runs where.
func trimPod(obj runtime.Object) (runtime.Object, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := jobPod(pod)
	out.Generation = pod.Generation
	out.Labels, out.Annotations, out.OwnerReferences = pod.Labels, pod.Annotations, pod.OwnerReferences
	out.CreationTimestamp, out.DeletionTimestamp = pod.CreationTimestamp, pod.DeletionTimestamp
	out.Status.Phase, out.Status.PodIP = pod.Status.Phase, pod.Status.PodIP
	for _, cs := range pod.Status.ContainerStatuses {
		out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: cs.Name, ContainerID: cs.ContainerID, State: cs.State, Ready: cs.Ready,
			RestartCount: cs.RestartCount, User: cs.User, LastTerminationState: cs.LastTerminationState,
		})
	}
	return out, nil
}
