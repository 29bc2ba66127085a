// Package handler is the memcached example operator's handler: it turns
// each Memcached into a Deployment of spec.size memcached servers owned by
// it, reports the servers' pods in status.nodes with Available and
// Progressing conditions, and holds a finalizer so that deleting a Memcached
// drains its servers and runs a clean-up step before the object goes away.
//
// The handler reads through a query.Interface and writes through an
// action.Interface, so the operator gives it query.For(op) and
// action.For(op) and its unit tests give it an in-memory sdktest.Client.
package handler

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	cachev1alpha1 "github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/apis/cache/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// Finalizer holds a deleted Memcached until the handler has drained its
// servers and run its clean-up step.
const Finalizer = "cache.example.handlerkit.dev/cleanup"

// DefaultImage is the memcached image the Deployments run unless
// Handler.Image says otherwise: the minimal image `make images` builds from
// Debian's memcached package (pkg/images/testimages.BuildMemcached).
const DefaultImage = "localhost/handlerkit/memcached:v1"

// Port is the TCP port memcached serves on in every pod.
const Port = 11211

// ContainerName is the name of the memcached container in the pods.
const ContainerName = "memcached"

// DrainPollInterval is how soon a Memcached being deleted is handled again
// while its servers are still stopping.
const DrainPollInterval = 2 * time.Second

// The labels of the Deployment and its pods. Name and Instance make up the
// Deployment's selector; ManagedBy tells the operator's pods from others.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is the value of LabelManagedBy on everything the operator makes.
	ManagedBy = "memcached-operator"
)

// Event reasons, as `kubectl describe memcached` shows them.
const (
	ReasonDeploymentCreated = "DeploymentCreated"
	ReasonDeploymentScaled  = "DeploymentScaled"
	ReasonDeploymentUpdated = "DeploymentUpdated"
	ReasonDraining          = "Draining"
	ReasonCleanedUp         = "CleanedUp"
	ReasonCleanupFailed     = "CleanupFailed"
)

// Handler handles Memcached events. Build it with its reader and writer;
// the zero values of the other fields are the defaults.
type Handler struct {
	// Read reads Deployments and Pods: query.For(op) in the operator (from
	// the cache of its watches), an sdktest.Client in unit tests.
	Read query.Interface
	// Write writes them: action.For(op), or an sdktest.Client.
	Write action.Interface
	// Scheme tells the kind of the owner reference; nil is fine for objects
	// the framework delivers, which carry apiVersion and kind.
	Scheme *runtime.Scheme
	// Image is the memcached image; empty means DefaultImage.
	Image string
	// Recorder records Events; nil means the handling Operator's
	// (sdk.EventRecorderFrom), which only logs outside a handling.
	Recorder record.EventRecorder
	// CleanUp, when set, replaces the clean-up step (see cleanUp); tests use
	// it to observe or fail the step.
	CleanUp func(ctx context.Context, m *cachev1alpha1.Memcached) error
}

// Handle makes the cluster match one Memcached. It is level-driven: every
// call compares the desired state with the actual one, whatever woke it (the
// Memcached, its Deployment or one of its pods), and writes only what
// differs.
func (h *Handler) Handle(ctx context.Context, e sdk.Event) error {
	m, ok := e.Object.(*cachev1alpha1.Memcached)
	if !ok {
		return sdk.Terminal(fmt.Errorf("handler: expected a *v1alpha1.Memcached, got %T", e.Object))
	}
	if e.Deleted {
		// The finalizer already ran; the owner reference lets the garbage
		// collector delete the Deployment, its ReplicaSets and pods.
		return nil
	}
	if !m.DeletionTimestamp.IsZero() {
		return h.finalize(ctx, m)
	}
	// The finalizer goes on first, so that no Deployment ever exists whose
	// deletion would skip the clean-up.
	if _, err := action.AddFinalizer(ctx, h.Write, m, Finalizer); err != nil {
		return err // a Conflict is retried with the current state
	}
	dep, err := h.ensureDeployment(ctx, m, m.Spec.Size)
	if err != nil {
		return err
	}
	return h.updateStatus(ctx, m, dep)
}

// ensureDeployment creates or updates the Memcached's Deployment with size
// replicas, and writes nothing when it is as it should be.
func (h *Handler) ensureDeployment(ctx context.Context, m *cachev1alpha1.Memcached, size int32) (*appsv1.Deployment, error) {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name}}
	var before *int32
	result, err := action.CreateOrUpdate(ctx, h.Read, h.Write, dep, func() error {
		before = dep.Spec.Replicas
		return h.mutateDeployment(m, dep, size)
	})
	if err != nil {
		return nil, err
	}
	switch {
	case result == action.Created:
		h.recorder(ctx).Eventf(m, corev1.EventTypeNormal, ReasonDeploymentCreated, "Created Deployment %s with %d replicas", dep.Name, size)
	case result == action.Updated && before != nil && *before != size:
		h.recorder(ctx).Eventf(m, corev1.EventTypeNormal, ReasonDeploymentScaled, "Scaled Deployment %s from %d to %d replicas", dep.Name, *before, size)
	case result == action.Updated:
		h.recorder(ctx).Eventf(m, corev1.EventTypeNormal, ReasonDeploymentUpdated, "Updated Deployment %s", dep.Name)
	}
	return dep, nil
}

// mutateDeployment sets the fields of dep that the operator manages and
// leaves every other one alone. It changes the read object in place rather
// than replacing its spec, so that the fields the API server defaulted
// (strategy, dnsPolicy, terminationMessagePath, ...) stay as they are, and
// CreateOrUpdate finds nothing to write when the Memcached has not changed.
func (h *Handler) mutateDeployment(m *cachev1alpha1.Memcached, dep *appsv1.Deployment, size int32) error {
	labels := Labels(m)
	if dep.Labels == nil {
		dep.Labels = map[string]string{}
	}
	for k, v := range labels {
		dep.Labels[k] = v
	}
	dep.Spec.Replicas = ptr.To(size)
	if dep.Spec.Selector == nil { // immutable once created
		dep.Spec.Selector = &metav1.LabelSelector{MatchLabels: selectorLabels(m)}
	}
	tmpl := &dep.Spec.Template
	if tmpl.Labels == nil {
		tmpl.Labels = map[string]string{}
	}
	for k, v := range labels {
		tmpl.Labels[k] = v
	}
	i := slices.IndexFunc(tmpl.Spec.Containers, func(c corev1.Container) bool { return c.Name == ContainerName })
	if i < 0 {
		tmpl.Spec.Containers = append(tmpl.Spec.Containers, corev1.Container{Name: ContainerName})
		i = len(tmpl.Spec.Containers) - 1
	}
	c := &tmpl.Spec.Containers[i]
	c.Image = h.image()
	c.ImagePullPolicy = corev1.PullIfNotPresent
	c.Args = []string{"-p", fmt.Sprint(Port), "-U", "0", "-m", "64"}
	c.Ports = []corev1.ContainerPort{{Name: "memcached", ContainerPort: Port, Protocol: corev1.ProtocolTCP}}
	// Every field is set, defaults included, so that the object read back
	// equals the one this function makes.
	c.ReadinessProbe = &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("memcached")}},
		PeriodSeconds:    2,
		TimeoutSeconds:   1,
		SuccessThreshold: 1,
		FailureThreshold: 3,
	}
	c.SecurityContext = &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To[int64](65534),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	return action.SetControllerReference(m, dep, h.Scheme)
}

// updateStatus lists the Memcached's pods and writes status.nodes and the
// conditions, through the status subresource and only when they changed.
func (h *Handler) updateStatus(ctx context.Context, m *cachev1alpha1.Memcached, dep *appsv1.Deployment) error {
	nodes, ready, err := h.nodes(ctx, m)
	if err != nil {
		return err
	}
	size := m.Spec.Size
	available := int32(len(nodes)) == size && ready == size
	_, err = action.UpdateStatusWithRetry(ctx, h.Read, h.Write, m, func() error {
		m.Status.ObservedGeneration = m.Generation
		m.Status.Nodes = nodes
		m.Status.ReadyNodes = ready
		if available {
			setCondition(m, cachev1alpha1.ConditionAvailable, metav1.ConditionTrue, cachev1alpha1.ReasonAllNodesReady,
				fmt.Sprintf("%d of %d memcached servers are ready", ready, size))
			setCondition(m, cachev1alpha1.ConditionProgressing, metav1.ConditionFalse, cachev1alpha1.ReasonAllNodesReady,
				fmt.Sprintf("Deployment %s has %d ready replicas", dep.Name, ready))
		} else {
			setCondition(m, cachev1alpha1.ConditionAvailable, metav1.ConditionFalse, cachev1alpha1.ReasonScaling,
				fmt.Sprintf("%d of %d memcached servers are ready, %d pods exist", ready, size, len(nodes)))
			setCondition(m, cachev1alpha1.ConditionProgressing, metav1.ConditionTrue, cachev1alpha1.ReasonScaling,
				fmt.Sprintf("Deployment %s is scaling to %d replicas", dep.Name, size))
		}
		return nil
	})
	return err
}

// setCondition sets a condition; its lastTransitionTime moves only when its
// status does, so an unchanged state makes an unchanged status.
func setCondition(m *cachev1alpha1.Memcached, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: m.Generation,
	})
}

// nodes returns the sorted names of the Memcached's pods that are not
// terminating or finished, and how many of them are Ready.
func (h *Handler) nodes(ctx context.Context, m *cachev1alpha1.Memcached) ([]string, int32, error) {
	var pods corev1.PodList
	if err := h.Read.List(ctx, m.Namespace, &pods, query.MatchingLabels(selectorLabels(m))); err != nil {
		return nil, 0, err
	}
	var names []string
	var ready int32
	for i := range pods.Items {
		p := &pods.Items[i]
		if !p.DeletionTimestamp.IsZero() || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		names = append(names, p.Name)
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	slices.Sort(names)
	return names, ready, nil
}

// finalize runs while a deleted Memcached still carries the finalizer: it
// scales the Deployment to zero, waits until no memcached server runs, runs
// the clean-up step and removes the finalizer. The API server then deletes
// the Memcached, and the garbage collector its Deployment.
func (h *Handler) finalize(ctx context.Context, m *cachev1alpha1.Memcached) error {
	if !action.HasFinalizer(m, Finalizer) {
		return nil // someone else's finalizer holds it; ours is done
	}
	// Drain first, so that the clean-up runs when no client can still be
	// served by a server it is about to forget.
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name}}
	err := h.Read.Get(ctx, dep)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 0 {
			h.recorder(ctx).Eventf(m, corev1.EventTypeNormal, ReasonDraining, "Scaling Deployment %s to 0 before clean-up", dep.Name)
			if _, err := h.ensureDeployment(ctx, m, 0); err != nil {
				return err
			}
		}
	}
	nodes, _, err := h.nodes(ctx, m)
	if err != nil {
		return err
	}
	if len(nodes) > 0 {
		// Waiting is not a failure: RequeueAfter neither backs off nor counts
		// as an error. Pod deletions wake the handler too; the requeue only
		// bounds the wait should one go unnoticed.
		return sdk.RequeueAfter(DrainPollInterval)
	}
	if err := h.cleanUp(ctx, m); err != nil {
		h.recorder(ctx).Eventf(m, corev1.EventTypeWarning, ReasonCleanupFailed, "Clean-up failed, will retry: %v", err)
		return err // retried with backoff; the Memcached stays until it succeeds
	}
	h.recorder(ctx).Event(m, corev1.EventTypeNormal, ReasonCleanedUp, "Servers drained and clean-up done; removing the finalizer")
	_, err = action.RemoveFinalizer(ctx, h.Write, m, Finalizer)
	return err
}

// cleanUp is the place for clean-up outside Kubernetes: deregistering the
// servers from a service directory, deleting a cloud resource made for the
// cache, telling the applications that used it. What the operator made
// inside Kubernetes needs none of this: owner references let the garbage
// collector delete it. The step must be idempotent, because it runs again
// when removing the finalizer fails or the operator restarts in between.
// The example has nothing outside the cluster to clean, so it only logs.
func (h *Handler) cleanUp(ctx context.Context, m *cachev1alpha1.Memcached) error {
	if h.CleanUp != nil {
		return h.CleanUp(ctx, m)
	}
	sdk.LoggerFrom(ctx).Infof("clean-up of Memcached %s/%s: nothing outside the cluster to clean", m.Namespace, m.Name)
	return nil
}

func (h *Handler) image() string {
	if h.Image != "" {
		return h.Image
	}
	return DefaultImage
}

func (h *Handler) recorder(ctx context.Context) record.EventRecorder {
	if h.Recorder != nil {
		return h.Recorder
	}
	return sdk.EventRecorderFrom(ctx)
}

// Labels returns the labels of a Memcached's Deployment and pods.
func Labels(m *cachev1alpha1.Memcached) map[string]string {
	l := selectorLabels(m)
	l[LabelManagedBy] = ManagedBy
	return l
}

func selectorLabels(m *cachev1alpha1.Memcached) map[string]string {
	return map[string]string{LabelName: "memcached", LabelInstance: m.Name}
}

// PodOwner maps a memcached pod to the key ("namespace/name") of the
// Memcached it serves, from its labels; other pods map to nothing. Pods are
// owned by ReplicaSets, not by the Memcached, so a Pod watch wakes the
// Memcached through this function (sdk.WithMapTo) rather than WithOwnerOf.
func PodOwner(_ context.Context, obj runtime.Object) []string {
	o, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	l := o.GetLabels()
	if l[LabelManagedBy] != ManagedBy || l[LabelName] != "memcached" || l[LabelInstance] == "" {
		return nil
	}
	return []string{o.GetNamespace() + "/" + l[LabelInstance]}
}
