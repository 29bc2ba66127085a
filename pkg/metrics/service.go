package metrics

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/handlerkit/handlerkit/pkg/leader"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
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
		"app.kubernetes.io/name":      o.OperatorName,
		"app.kubernetes.io/component": "metrics",
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

// deploymentOwner follows the pod's controller ReplicaSet to its controller Deployment. It returns nil when
// either link is missing, which is normal for a pod run by hand or by another kind of workload.
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
	dep, err := client.AppsV1().Deployments(pod.Namespace).Get(ctx, depRef.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("metrics: get Deployment %s: %w", depRef.Name, err)
	}
	// Not a controller reference: the Deployment controller must not think it manages the Service.
	return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID}, nil
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
	endpoint := map[string]any{"port": o.PortName, "path": "/metrics"}
	if o.ScrapeInterval != "" {
		endpoint["interval"] = o.ScrapeInterval
	}
	matchLabels := map[string]any{}
	for k, v := range svcLabels {
		matchLabels[k] = v
	}
	spec := map[string]any{
		"selector":          map[string]any{"matchLabels": matchLabels},
		"namespaceSelector": map[string]any{"matchNames": []any{svc.Namespace}},
		"endpoints":         []any{endpoint},
	}
	monitors := dyn.Resource(ServiceMonitorGVR).Namespace(svc.Namespace)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		existing, err := monitors.Get(ctx, svc.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			sm := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "monitoring.coreos.com/v1",
				"kind":       "ServiceMonitor",
				"metadata":   map[string]any{"name": svc.Name, "namespace": svc.Namespace},
				"spec":       spec,
			}}
			sm.SetLabels(svcLabels)
			sm.SetOwnerReferences(owners)
			_, err := monitors.Create(ctx, sm, metav1.CreateOptions{})
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
		l := existing.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		maps.Copy(l, svcLabels)
		existing.SetLabels(l)
		existing.SetOwnerReferences(owners)
		existing.Object["spec"] = spec
		_, err = monitors.Update(ctx, existing, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("metrics: ensure ServiceMonitor %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}
