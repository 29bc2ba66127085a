package metrics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/handlerkit/handlerkit/pkg/leader"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
)

// DefaultMetricsPort is the port of the default metrics address ":8383" of the sdk.
const DefaultMetricsPort = 8383

// DefaultMetricsPortName names the Service port; the ServiceMonitor endpoint refers to it by this name.
const DefaultMetricsPortName = "http-metrics"

// ServiceMonitorGVR is the Prometheus Operator's ServiceMonitor resource. EnsureService creates one only when
// discovery shows it.
var ServiceMonitorGVR = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}

// AnnotationServiceMonitorLabels is the ServiceMonitor annotation in which EnsureService records the keys of the
// ServiceOptions.ServiceMonitorLabels it set, comma-separated, so that a later call removes a label that is no
// longer asked for and leaves alone the labels others put on the ServiceMonitor.
const AnnotationServiceMonitorLabels = "handlerkit.dev/service-monitor-labels"

// Labels EnsureService puts on the Service and the ServiceMonitor. The ServiceMonitor's selector matches the
// Service by them, so ServiceOptions.ServiceMonitorLabels may not set them.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelComponent = "app.kubernetes.io/component"
)

// ValidateServiceMonitorLabels checks labels meant for ServiceOptions.ServiceMonitorLabels: every key a qualified
// name and every value a label value, as Kubernetes requires, and neither LabelName nor LabelComponent, which
// EnsureService sets itself (its values always win, so another value could only be silently lost). EnsureService
// calls it; a command line can call it to refuse a bad flag before it starts.
func ValidateServiceMonitorLabels(labels map[string]string) error {
	keys := slices.Sorted(maps.Keys(labels))
	for _, k := range keys {
		v := labels[k]
		if k == LabelName || k == LabelComponent {
			return fmt.Errorf("metrics: ServiceMonitor label %s is the framework's own (the ServiceMonitor selects the metrics Service by it, and its value always wins); choose another key", k)
		}
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			return fmt.Errorf("metrics: ServiceMonitor label key %q: %s", k, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			return fmt.Errorf("metrics: ServiceMonitor label %s value %q: %s", k, v, strings.Join(msgs, "; "))
		}
	}
	return nil
}

// ServiceOptions configures EnsureService. The zero value works inside the operator's pod when the pod belongs to
// a Deployment.
type ServiceOptions struct {
	// OperatorName names the Service "<OperatorName>-metrics". Default: the name of the Deployment that owns the
	// pod (pod -> ReplicaSet -> Deployment). Required when the pod has no Deployment.
	OperatorName string
	// Namespace is the operator's namespace. Default: leader.DefaultNamespace().
	Namespace string
	// PodName is the operator's own pod, whose labels and owners are used. Default: leader.DefaultPodName().
	PodName string
	// Port is the port the metrics server listens on. Default: DefaultMetricsPort.
	Port int32
	// PortName names the Service port. Default: DefaultMetricsPortName.
	PortName string
	// Selector selects the operator's pods. Default: the pod's labels minus the leader label and the per-revision
	// labels (leader.OperatorLabels).
	Selector map[string]string
	// ScrapeOnlyLeader adds the leader label to the selector, so that only the leader is scraped. Without it every
	// replica is scraped; each one serves its own metrics and leader_election_master_status tells them apart.
	ScrapeOnlyLeader bool
	// LeaderLabelKey and LeaderLabelValue are the leader label. Default: leader.DefaultLabelKey=DefaultLabelValue.
	LeaderLabelKey, LeaderLabelValue string
	// ScrapeInterval is the ServiceMonitor endpoint's interval, such as "30s". Default: Prometheus' own.
	ScrapeInterval string
	// ServiceMonitorLabels are added to the ServiceMonitor's labels, for a Prometheus whose serviceMonitorSelector
	// asks for them (kube-prometheus-stack's selects release=<its release name>). They must be valid label keys
	// and values and may not include LabelName or LabelComponent, which EnsureService sets itself: such options
	// are refused with an error before anything is written (ValidateServiceMonitorLabels). They are kept in sync
	// on every call: a changed value is updated, and a key dropped since the last call is removed (the keys are
	// recorded in the annotation AnnotationServiceMonitorLabels); labels that others set stay. The Service does
	// not get them.
	ServiceMonitorLabels map[string]string
	// Logger logs what was created or updated. Default: logrus.StandardLogger().
	Logger logrus.FieldLogger
}

// EnsureService creates or updates the Service "<operator>-metrics" in the operator's namespace, and a
// ServiceMonitor for it when the cluster serves monitoring.coreos.com/v1 ServiceMonitors. Both are owned by the
// operator's Deployment when there is one, so they go away with it. Calling it again on every start is the
// intended use: an existing Service is updated in place and keeps its ClusterIP.
func EnsureService(ctx context.Context, restConfig *rest.Config, opts ServiceOptions) (*corev1.Service, error) {
	if restConfig == nil {
		return nil, errors.New("metrics: nil rest config")
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("metrics: build client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("metrics: build dynamic client: %w", err)
	}
	return ensureService(ctx, client, dyn, opts)
}

func ensureService(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, o ServiceOptions) (*corev1.Service, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	var owner *metav1.OwnerReference
	if o.PodName != "" {
		pod, err := client.CoreV1().Pods(o.Namespace).Get(ctx, o.PodName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("metrics: get own pod %s/%s: %w", o.Namespace, o.PodName, err)
		}
		owner, err = deploymentOwner(ctx, client, pod)
		if err != nil {
			return nil, err
		}
		if o.Selector == nil {
			o.Selector = leader.OperatorLabels(pod, o.LeaderLabelKey)
		}
		if o.OperatorName == "" && owner != nil {
			o.OperatorName = owner.Name
		}
	}
	if o.OperatorName == "" {
		return nil, errors.New("metrics: ServiceOptions.OperatorName is required when the pod has no Deployment (or PodName is unknown)")
	}
	if len(o.Selector) == 0 {
		return nil, errors.New("metrics: empty selector: the pod has no labels to select on; set ServiceOptions.Selector")
	}
	name := o.OperatorName + "-metrics"
	if msgs := validation.IsDNS1035Label(name); len(msgs) > 0 {
		return nil, fmt.Errorf("metrics: invalid Service name %q: %v", name, msgs)
	}

	selector := maps.Clone(o.Selector)
	if o.ScrapeOnlyLeader {
		selector[o.LeaderLabelKey] = o.LeaderLabelValue
	}
	svcLabels := map[string]string{
		LabelName:      o.OperatorName,
		LabelComponent: "metrics",
	}
	var owners []metav1.OwnerReference
	if owner != nil {
		owners = []metav1.OwnerReference{*owner}
	}
	ports := []corev1.ServicePort{{
		Name:       o.PortName,
		Port:       o.Port,
		TargetPort: intstr.FromInt32(o.Port),
		Protocol:   corev1.ProtocolTCP,
	}}

	services := client.CoreV1().Services(o.Namespace)
	var svc *corev1.Service
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		existing, err := services.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			created, err := services.Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: o.Namespace, Labels: svcLabels, OwnerReferences: owners},
				Spec:       corev1.ServiceSpec{Selector: selector, Ports: ports},
			}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				// Another replica created it between our Get and Create: update that one instead.
				return apierrors.NewConflict(schema.GroupResource{Resource: "services"}, name, err)
			}
			if err == nil {
				o.Logger.WithField("service", name).Info("metrics: created the metrics Service")
			}
			svc = created
			return err
		}
		if err != nil {
			return err
		}
		// Only the fields we own change; spec.clusterIP, clusterIPs and anything others set stay as they are.
		if existing.Labels == nil {
			existing.Labels = map[string]string{}
		}
		maps.Copy(existing.Labels, svcLabels)
		existing.OwnerReferences = owners
		existing.Spec.Selector = selector
		existing.Spec.Ports = ports
		updated, err := services.Update(ctx, existing, metav1.UpdateOptions{})
		if err == nil {
			o.Logger.WithField("service", name).Debug("metrics: updated the metrics Service")
		}
		svc = updated
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("metrics: ensure Service %s/%s: %w", o.Namespace, name, err)
	}
	if err := ensureServiceMonitor(ctx, client, dyn, svc, svcLabels, owners, o); err != nil {
		return svc, err
	}
	return svc, nil
}

func (o *ServiceOptions) defaults() error {
	if o.Namespace == "" {
		o.Namespace = leader.DefaultNamespace()
	}
	if o.Namespace == "" {
		return errors.New("metrics: the operator's namespace is unknown: set POD_NAMESPACE or ServiceOptions.Namespace")
	}
	if o.PodName == "" {
		o.PodName = leader.DefaultPodName()
	}
	if o.Port == 0 {
		o.Port = DefaultMetricsPort
	}
	if o.Port < 1 || o.Port > 65535 {
		return fmt.Errorf("metrics: invalid port %d", o.Port)
	}
	if err := ValidateServiceMonitorLabels(o.ServiceMonitorLabels); err != nil {
		return err
	}
	if o.PortName == "" {
		o.PortName = DefaultMetricsPortName
	}
	if o.LeaderLabelKey == "" {
		o.LeaderLabelKey, o.LeaderLabelValue = leader.DefaultLabelKey, leader.DefaultLabelValue
	}
	if o.Logger == nil {
		o.Logger = logrus.StandardLogger()
	}
	return nil
}

// deploymentOwner follows the pod's controller ReplicaSet to its controller Deployment, named with its UID by the
// ReplicaSet's controller reference (the Deployment itself is not read: no get on deployments). It returns nil
// when either link is missing, which is normal for a pod run by hand or by another kind of workload.
func deploymentOwner(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) (*metav1.OwnerReference, error) {
	rsRef := metav1.GetControllerOf(pod)
	if rsRef == nil || rsRef.Kind != "ReplicaSet" {
		return nil, nil
	}
	rs, err := client.AppsV1().ReplicaSets(pod.Namespace).Get(ctx, rsRef.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("metrics: get ReplicaSet %s: %w", rsRef.Name, err)
	}
	depRef := metav1.GetControllerOf(rs)
	if depRef == nil || depRef.Kind != "Deployment" {
		return nil, nil
	}
	// Not a controller reference: the Deployment controller must not think it manages the Service.
	return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: depRef.Name, UID: depRef.UID}, nil
}

// serviceMonitorServed asks discovery whether monitoring.coreos.com/v1 serves servicemonitors.
func serviceMonitorServed(client kubernetes.Interface) (bool, error) {
	list, err := client.Discovery().ServerResourcesForGroupVersion(ServiceMonitorGVR.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("metrics: discover %s: %w", ServiceMonitorGVR.GroupVersion(), err)
	}
	for _, r := range list.APIResources {
		if r.Name == ServiceMonitorGVR.Resource {
			return true, nil
		}
	}
	return false, nil
}

func ensureServiceMonitor(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, svc *corev1.Service,
	svcLabels map[string]string, owners []metav1.OwnerReference, o ServiceOptions) error {
	served, err := serviceMonitorServed(client)
	if err != nil {
		return err
	}
	if !served {
		o.Logger.Debug("metrics: the cluster has no ServiceMonitor kind; skipping it")
		return nil
	}
	want := serviceMonitor(svc, svcLabels, owners, o)
	monitors := dyn.Resource(ServiceMonitorGVR).Namespace(svc.Namespace)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		existing, err := monitors.Get(ctx, svc.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err := monitors.Create(ctx, want.DeepCopy(), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(ServiceMonitorGVR.GroupResource(), svc.Name, err)
			}
			if err == nil {
				o.Logger.WithField("servicemonitor", svc.Name).Info("metrics: created the ServiceMonitor")
			}
			return err
		}
		if err != nil {
			return err
		}
		if !mergeServiceMonitor(existing, want) {
			return nil
		}
		_, err = monitors.Update(ctx, existing, metav1.UpdateOptions{})
		if err == nil {
			o.Logger.WithField("servicemonitor", svc.Name).Info("metrics: updated the ServiceMonitor")
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("metrics: ensure ServiceMonitor %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// serviceMonitor is the ServiceMonitor EnsureService writes for svc: labelled with the Service's labels and
// o.ServiceMonitorLabels (which may not repeat the Service's keys: ValidateServiceMonitorLabels), selecting the
// Service by its labels.
func serviceMonitor(svc *corev1.Service, svcLabels map[string]string, owners []metav1.OwnerReference, o ServiceOptions) *unstructured.Unstructured {
	endpoint := map[string]any{"port": o.PortName, "path": "/metrics"}
	if o.ScrapeInterval != "" {
		endpoint["interval"] = o.ScrapeInterval
	}
	matchLabels := map[string]any{}
	for k, v := range svcLabels {
		matchLabels[k] = v
	}
	sm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "ServiceMonitor",
		"metadata":   map[string]any{"name": svc.Name, "namespace": svc.Namespace},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": matchLabels},
			"namespaceSelector": map[string]any{"matchNames": []any{svc.Namespace}},
			"endpoints":         []any{endpoint},
		},
	}}
	labels := maps.Clone(o.ServiceMonitorLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	// Validated not to collide; the Service's labels are written last all the same, so they win.
	maps.Copy(labels, svcLabels)
	sm.SetLabels(labels)
	if len(o.ServiceMonitorLabels) > 0 {
		keys := slices.Collect(maps.Keys(o.ServiceMonitorLabels))
		sort.Strings(keys)
		sm.SetAnnotations(map[string]string{AnnotationServiceMonitorLabels: strings.Join(keys, ",")})
	}
	sm.SetOwnerReferences(owners)
	return sm
}

// mergeServiceMonitor brings existing to want in the fields EnsureService owns: its labels (removing those of
// ServiceMonitorLabels that the previous call recorded and this one no longer sets), the record of those labels,
// the owners and the spec. Everything else stays. It reports whether anything changed.
func mergeServiceMonitor(existing, want *unstructured.Unstructured) bool {
	labels := maps.Clone(existing.GetLabels())
	if labels == nil {
		labels = map[string]string{}
	}
	annotations := maps.Clone(existing.GetAnnotations())
	if annotations == nil {
		annotations = map[string]string{}
	}
	wantLabels := want.GetLabels()
	for _, k := range strings.Split(annotations[AnnotationServiceMonitorLabels], ",") {
		if _, keep := wantLabels[k]; k != "" && !keep {
			delete(labels, k)
		}
	}
	maps.Copy(labels, wantLabels)
	if rec, ok := want.GetAnnotations()[AnnotationServiceMonitorLabels]; ok {
		annotations[AnnotationServiceMonitorLabels] = rec
	} else {
		delete(annotations, AnnotationServiceMonitorLabels)
	}
	changed := !maps.Equal(labels, existing.GetLabels()) ||
		!maps.Equal(annotations, existing.GetAnnotations()) ||
		!equality.Semantic.DeepEqual(existing.GetOwnerReferences(), want.GetOwnerReferences()) ||
		!equality.Semantic.DeepEqual(existing.Object["spec"], want.Object["spec"])
	if !changed {
		return false
	}
	existing.SetLabels(labels)
	existing.SetAnnotations(annotations)
	existing.SetOwnerReferences(want.GetOwnerReferences())
	existing.Object["spec"] = want.Object["spec"]
	return true
}
