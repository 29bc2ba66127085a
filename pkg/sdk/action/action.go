// Package action writes Kubernetes objects for handlers: Create, Update,
// UpdateStatus, Patch (merge, JSON, strategic merge and server-side apply,
// of the object or, with WithSubresource, of its status) and Delete. Every call writes the server's reply back into the object, so
// the caller sees the new resourceVersion, defaults and status. Bad input
// (a nil object, an object without kind, a kind the server does not serve)
// returns a clear error; nothing panics.
//
// The package-level functions write through the Operator running the
// calling handler (found through its context), else sdk.Default(); For
// gives a Writer on an explicit Operator. Every call takes a context first.
// Writer implements Interface, which pkg/sdk/sdktest implements in memory
// for unit tests.
package action

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/internal/convert"
)

// DefaultFieldManager names the writer in managedFields for server-side
// apply when WithFieldManager is not given.
const DefaultFieldManager = "handlerkit"

// PatchType says how Patch interprets its data.
type PatchType = types.PatchType

// The patch types Patch accepts.
const (
	// MergePatch is an RFC 7386 JSON merge patch.
	MergePatch = types.MergePatchType
	// JSONPatch is an RFC 6902 list of operations.
	JSONPatch = types.JSONPatchType
	// StrategicMergePatch merges lists by key; built-in kinds only.
	StrategicMergePatch = types.StrategicMergePatchType
	// ApplyPatch is server-side apply; nil data applies the object itself.
	ApplyPatch = types.ApplyPatchType
)

// Option tunes one write.
type Option func(*options)

type options struct {
	fieldManager  string
	dryRun        bool
	force         bool
	propagation   *metav1.DeletionPropagation
	gracePeriod   *int64
	preconditions *metav1.Preconditions
	subresource   string
}

// WithFieldManager names the writer in managedFields. Server-side apply
// defaults to DefaultFieldManager; other writes let the server choose.
func WithFieldManager(name string) Option { return func(o *options) { o.fieldManager = name } }

// DryRun asks the server to validate and answer without persisting.
func DryRun() Option { return func(o *options) { o.dryRun = true } }

// Force makes server-side apply take ownership of conflicting fields.
func Force() Option { return func(o *options) { o.force = true } }

// WithPropagationPolicy sets how Delete treats dependents (Orphan,
// Background or Foreground).
func WithPropagationPolicy(p metav1.DeletionPropagation) Option {
	return func(o *options) { o.propagation = &p }
}

// WithGracePeriod sets Delete's grace period in seconds.
func WithGracePeriod(seconds int64) Option { return func(o *options) { o.gracePeriod = &seconds } }

// WithPreconditions makes Delete fail unless the object still has this uid
// and resourceVersion (empty values are not checked).
func WithPreconditions(uid types.UID, resourceVersion string) Option {
	return func(o *options) {
		p := metav1.Preconditions{}
		if uid != "" {
			p.UID = &uid
		}
		if resourceVersion != "" {
			p.ResourceVersion = &resourceVersion
		}
		o.preconditions = &p
	}
}

// WithSubresource makes Patch write the named subresource of the object
// instead of the object itself: WithSubresource("status") patches the
// status, which a patch of the object leaves unchanged when the kind has
// a status subresource. Any patch type works, server-side apply included.
// A merge patch of status carries no resourceVersion, so it cannot
// conflict with a concurrent write, unlike UpdateStatus. Only Patch takes
// it; the other writes return an error.
func WithSubresource(name string) Option { return func(o *options) { o.subresource = name } }

// onlyPatch refuses WithSubresource for the writes other than Patch.
func (o options) onlyPatch(verb, kind string) error {
	if o.subresource != "" {
		return fmt.Errorf("action: %s %s: WithSubresource(%q) applies only to Patch", verb, kind, o.subresource)
	}
	return nil
}

func collect(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

func (o options) dryRunValue() []string {
	if o.dryRun {
		return []string{metav1.DryRunAll}
	}
	return nil
}

// Writer writes through one Operator.
type Writer struct{ op *sdk.Operator }

// For returns a Writer on op.
func For(op *sdk.Operator) *Writer { return &Writer{op: op} }

// writerFor returns a Writer on the Operator running the handler that ctx
// belongs to (sdk.OperatorFrom), else on the Default Operator.
func writerFor(ctx context.Context) (*Writer, error) {
	if ctx == nil {
		return nil, errors.New("action: nil context")
	}
	if op := sdk.OperatorFrom(ctx); op != nil {
		return For(op), nil
	}
	op, err := sdk.Default()
	if err != nil {
		return nil, err
	}
	return For(op), nil
}

// Create creates obj and writes the created object back into it. Like every
// package-level function here, it writes through the Operator running the
// handler that ctx belongs to, else through sdk.Default(), and ctx bounds
// the request. Code that should be unit tested without an API server takes
// an Interface instead.
func Create(ctx context.Context, obj runtime.Object, opts ...Option) error {
	w, err := writerFor(ctx)
	if err != nil {
		return err
	}
	return w.Create(ctx, obj, opts...)
}

// Update replaces obj and writes the stored object back into it. obj's
// resourceVersion guards against lost updates: a stale one is a Conflict.
func Update(ctx context.Context, obj runtime.Object, opts ...Option) error {
	w, err := writerFor(ctx)
	if err != nil {
		return err
	}
	return w.Update(ctx, obj, opts...)
}

// UpdateStatus writes obj's status subresource and writes the stored object
// back into it.
func UpdateStatus(ctx context.Context, obj runtime.Object, opts ...Option) error {
	w, err := writerFor(ctx)
	if err != nil {
		return err
	}
	return w.UpdateStatus(ctx, obj, opts...)
}

// Patch applies data of type pt to the object named by obj and writes the
// patched object back into obj; see Writer.Patch.
func Patch(ctx context.Context, obj runtime.Object, pt PatchType, data []byte, opts ...Option) error {
	w, err := writerFor(ctx)
	if err != nil {
		return err
	}
	return w.Patch(ctx, obj, pt, data, opts...)
}

// Delete deletes the object named by obj; see Writer.Delete.
func Delete(ctx context.Context, obj runtime.Object, opts ...Option) error {
	w, err := writerFor(ctx)
	if err != nil {
		return err
	}
	return w.Delete(ctx, obj, opts...)
}

// target is a resolved object: its kind, resource and client.
type target struct {
	gvk       schema.GroupVersionKind
	client    dynamic.ResourceInterface
	mapping   *meta.RESTMapping
	namespace string
	name      string
}

func (w *Writer) resolve(verb string, obj runtime.Object, needName bool) (*target, error) {
	if w == nil || w.op == nil {
		return nil, fmt.Errorf("action: %s: nil Writer", verb)
	}
	if convert.IsNil(obj) {
		return nil, fmt.Errorf("action: %s: %w", verb, convert.ErrNilObject)
	}
	gvk, err := w.op.KindOf(obj)
	if err != nil {
		return nil, fmt.Errorf("action: %s: %w", verb, err)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("action: %s %s: %w", verb, gvk.Kind, err)
	}
	mapping, err := w.op.RESTMapping(gvk)
	if err != nil {
		return nil, fmt.Errorf("action: %s: %w", verb, err)
	}
	t := &target{gvk: gvk, mapping: mapping, namespace: m.GetNamespace(), name: m.GetName()}
	if needName && t.name == "" {
		return nil, fmt.Errorf("action: %s %s: metadata.name is empty", verb, gvk.Kind)
	}
	if !needName && t.name == "" && m.GetGenerateName() == "" {
		return nil, fmt.Errorf("action: %s %s: metadata.name and metadata.generateName are empty", verb, gvk.Kind)
	}
	res := w.op.DynamicClient().Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if t.namespace == "" {
			return nil, fmt.Errorf("action: %s %s %q: metadata.namespace is empty", verb, gvk.Kind, t.name)
		}
		t.client = res.Namespace(t.namespace)
	} else {
		t.namespace = ""
		t.client = res
	}
	return t, nil
}

// writeBack replaces obj with the server's reply.
func writeBack(obj runtime.Object, reply *unstructured.Unstructured) error {
	if err := convert.Into(obj, reply); err != nil {
		return fmt.Errorf("action: write the reply back into %T: %w", obj, err)
	}
	return nil
}

// Create creates obj and writes the created object back into it.
func (w *Writer) Create(ctx context.Context, obj runtime.Object, opts ...Option) error {
	t, err := w.resolve("create", obj, false)
	if err != nil {
		return err
	}
	o := collect(opts)
	if err := o.onlyPatch("create", t.gvk.Kind); err != nil {
		return err
	}
	u, err := convert.ToUnstructured(obj, t.gvk)
	if err != nil {
		return fmt.Errorf("action: create %s: %w", t.gvk.Kind, err)
	}
	reply, err := t.client.Create(ctx, u, metav1.CreateOptions{FieldManager: o.fieldManager, DryRun: o.dryRunValue()})
	if err != nil {
		return err
	}
	return writeBack(obj, reply)
}

// Update replaces obj and writes the stored object back into it.
func (w *Writer) Update(ctx context.Context, obj runtime.Object, opts ...Option) error {
	return w.update(ctx, "update", obj, opts, false)
}

// UpdateStatus writes obj's status subresource and writes the stored object
// back into it.
func (w *Writer) UpdateStatus(ctx context.Context, obj runtime.Object, opts ...Option) error {
	return w.update(ctx, "update status", obj, opts, true)
}

func (w *Writer) update(ctx context.Context, verb string, obj runtime.Object, opts []Option, status bool) error {
	t, err := w.resolve(verb, obj, true)
	if err != nil {
		return err
	}
	o := collect(opts)
	if err := o.onlyPatch(verb, t.gvk.Kind); err != nil {
		return err
	}
	u, err := convert.ToUnstructured(obj, t.gvk)
	if err != nil {
		return fmt.Errorf("action: %s %s: %w", verb, t.gvk.Kind, err)
	}
	uo := metav1.UpdateOptions{FieldManager: o.fieldManager, DryRun: o.dryRunValue()}
	var reply *unstructured.Unstructured
	if status {
		reply, err = t.client.UpdateStatus(ctx, u, uo)
	} else {
		reply, err = t.client.Update(ctx, u, uo)
	}
	if err != nil {
		return err
	}
	return writeBack(obj, reply)
}

// Patch applies data of type pt to the object named by obj and writes the
// patched object back into obj. For ApplyPatch, nil data applies obj itself
// as the desired state (without resourceVersion and managedFields).
//
// A typed obj cannot tell an unset field from a zero one, so applying it
// sends, and makes the field manager own, every zero-valued field that its
// Go type does not omit: empty structs such as a Deployment's
// spec.strategy, and the zero scalars of CRD types whose fields lack
// omitempty, which then override other managers' values. To apply only
// the fields you manage, pass as data the JSON of an apply configuration
// from k8s.io/client-go/applyconfigurations (or one generated for your
// CRDs), which holds only what was set, with obj naming the object and
// receiving the reply; or apply a partial *unstructured.Unstructured with
// nil data.
//
// WithSubresource("status") patches the status subresource: only the
// status changes, and the reply, the whole object, is written back.
func (w *Writer) Patch(ctx context.Context, obj runtime.Object, pt PatchType, data []byte, opts ...Option) error {
	t, err := w.resolve("patch", obj, true)
	if err != nil {
		return err
	}
	o := collect(opts)
	po := metav1.PatchOptions{FieldManager: o.fieldManager, DryRun: o.dryRunValue()}
	switch pt {
	case MergePatch, JSONPatch, StrategicMergePatch:
		if len(data) == 0 {
			return fmt.Errorf("action: patch %s %q: empty %s patch", t.gvk.Kind, t.name, pt)
		}
		if o.force {
			return errors.New("action: Force applies only to server-side apply")
		}
	case ApplyPatch:
		if po.FieldManager == "" {
			po.FieldManager = DefaultFieldManager
		}
		if o.force {
			po.Force = &o.force
		}
		if len(data) == 0 {
			u, err := convert.ToUnstructured(obj, t.gvk)
			if err != nil {
				return fmt.Errorf("action: apply %s: %w", t.gvk.Kind, err)
			}
			u.SetResourceVersion("")
			u.SetManagedFields(nil)
			unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
			if data, err = json.Marshal(u.Object); err != nil {
				return fmt.Errorf("action: apply %s: %w", t.gvk.Kind, err)
			}
		}
	default:
		return fmt.Errorf("action: patch %s %q: unsupported patch type %q", t.gvk.Kind, t.name, pt)
	}
	var subresources []string
	if o.subresource != "" {
		subresources = []string{o.subresource}
	}
	reply, err := t.client.Patch(ctx, t.name, pt, data, po, subresources...)
	if err != nil {
		return err
	}
	return writeBack(obj, reply)
}

// Delete deletes the object named by obj. When the server answers with the
// object (it is still finalizing, or the kind returns deleted objects), that
// state is written back into obj; when it answers with a bare status, obj is
// left as it was.
func (w *Writer) Delete(ctx context.Context, obj runtime.Object, opts ...Option) error {
	t, err := w.resolve("delete", obj, true)
	if err != nil {
		return err
	}
	o := collect(opts)
	if err := o.onlyPatch("delete", t.gvk.Kind); err != nil {
		return err
	}
	do := metav1.DeleteOptions{
		TypeMeta:           metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"},
		DryRun:             o.dryRunValue(),
		PropagationPolicy:  o.propagation,
		GracePeriodSeconds: o.gracePeriod,
		Preconditions:      o.preconditions,
	}
	body, err := json.Marshal(&do)
	if err != nil {
		return fmt.Errorf("action: delete %s: %w", t.gvk.Kind, err)
	}
	// The dynamic client drops DELETE's reply, so this one call goes
	// through a plain REST request to keep it.
	raw, err := w.op.Clientset().CoreV1().RESTClient().Delete().
		AbsPath(resourcePath(t)...).
		SetHeader("Accept", "application/json").
		SetHeader("Content-Type", "application/json").
		Body(body).
		Do(ctx).Raw()
	if err != nil {
		return err
	}
	reply := &unstructured.Unstructured{}
	if err := json.Unmarshal(raw, &reply.Object); err != nil {
		return fmt.Errorf("action: delete %s %q: decode reply: %w", t.gvk.Kind, t.name, err)
	}
	if reply.GetKind() == "Status" || reply.GetKind() == "" {
		return nil
	}
	return writeBack(obj, reply)
}

func resourcePath(t *target) []string {
	gv := t.mapping.Resource.GroupVersion()
	p := []string{"/apis", gv.Group, gv.Version}
	if gv.Group == "" {
		p = []string{"/api", gv.Version}
	}
	if t.namespace != "" {
		p = append(p, "namespaces", t.namespace)
	}
	return append(p, t.mapping.Resource.Resource, t.name)
}
