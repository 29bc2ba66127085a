// Package manifest reads the YAML manifests under deploy/ and applies them to
// a cluster with server-side apply, the way `kubectl apply --server-side`
// does. It understands the small subset of kustomization.yaml that deploy/
// uses (resources, namespace, images, strategic-merge patches of built-in
// kinds, and configurations that name more fields for the namespace), so that the demo and the tests apply exactly
// what a cluster admin applies with `kubectl apply -k`.
package manifest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// FieldManager is the field manager of Apply's writes.
const FieldManager = "handlerkit-manifest"

// ReadFile returns the objects of a multi-document YAML file.
func ReadFile(file string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return Decode(data)
}

// Decode returns the objects of a multi-document YAML stream; empty
// documents are skipped, and a document without apiVersion or kind is an
// error.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" {
			return nil, fmt.Errorf("document %d: no apiVersion or kind", i)
		}
		out = append(out, u)
	}
}

// kustomization is the subset of kustomization.yaml that Build understands.
type kustomization struct {
	APIVersion     string   `json:"apiVersion"`
	Kind           string   `json:"kind"`
	Namespace      string   `json:"namespace"`
	Resources      []string `json:"resources"`
	Configurations []string `json:"configurations"`
	Images         []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
	Patches []struct {
		Path string `json:"path"`
	} `json:"patches"`
}

// transformerConfig is the subset of a kustomize transformer configuration
// (a kustomization's configurations) that Build understands: more fields the
// namespace is written to.
type transformerConfig struct {
	Namespace []fieldSpec `json:"namespace"`
}

// fieldSpec is one field of a kind, as kustomize names it: a path of keys
// separated by "/" ("\/" is a "/" inside a key), through lists element by
// element; create says whether a missing field is added.
type fieldSpec struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
	Path    string `json:"path"`
	Create  bool   `json:"create"`
}

// Build reads dir/kustomization.yaml and returns its resources (files, or
// directories with a kustomization of their own), with its namespace set on
// every namespaced object (and in the fields its configurations, or those of
// the kustomizations it includes, name, as kustomize does) and its image
// overrides applied to every container. Fields it does not understand are an
// error rather than silently ignored.
func Build(dir string) ([]*unstructured.Unstructured, error) {
	objs, _, err := build(dir)
	return objs, err
}

// build is Build that also returns the namespace fields of dir's
// configurations and of those it includes, which kustomize applies in every
// kustomization above them too.
func build(dir string) ([]*unstructured.Unstructured, []fieldSpec, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, nil, err
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return nil, nil, fmt.Errorf("%s/kustomization.yaml: %w (only resources, namespace, configurations, images and patches by path are supported here; use kubectl apply -k for more)", dir, err)
	}
	var objs []*unstructured.Unstructured
	var specs []fieldSpec
	for _, res := range k.Resources {
		p := filepath.Join(dir, res)
		info, err := os.Stat(p)
		if err != nil {
			return nil, nil, err
		}
		var got []*unstructured.Unstructured
		if info.IsDir() {
			var more []fieldSpec
			got, more, err = build(p)
			specs = append(specs, more...)
		} else {
			got, err = ReadFile(p)
		}
		if err != nil {
			return nil, nil, err
		}
		objs = append(objs, got...)
	}
	for _, p := range k.Patches {
		if err := applyPatchFile(objs, filepath.Join(dir, p.Path)); err != nil {
			return nil, nil, err
		}
	}
	for _, c := range k.Configurations {
		data, err := os.ReadFile(filepath.Join(dir, c))
		if err != nil {
			return nil, nil, err
		}
		var tc transformerConfig
		if err := yaml.UnmarshalStrict(data, &tc); err != nil {
			return nil, nil, fmt.Errorf("%s/%s: %w (only namespace field specs are supported here)", dir, c, err)
		}
		specs = append(specs, tc.Namespace...)
	}
	accounts := map[string]string{} // the ServiceAccounts' namespaces before this kustomization's
	for _, o := range objs {
		if o.GetKind() == "ServiceAccount" {
			accounts[o.GetName()] = o.GetNamespace()
		}
	}
	for _, o := range objs {
		if k.Namespace != "" {
			if namespaced(o) {
				o.SetNamespace(k.Namespace)
			}
			setSubjectNamespaces(o, k.Namespace, accounts)
			for _, fs := range specs {
				if fs.matches(o) {
					setField(o.Object, splitPath(fs.Path), k.Namespace, fs.Create)
				}
			}
		}
		for _, img := range k.Images {
			replaceImage(o, img.Name, img.NewName, img.NewTag)
		}
	}
	return objs, specs, nil
}

// matches says whether the field spec is for o's kind.
func (fs fieldSpec) matches(o *unstructured.Unstructured) bool {
	gvk := o.GroupVersionKind()
	return (fs.Kind == "" || fs.Kind == gvk.Kind) && (fs.Group == "" || fs.Group == gvk.Group) &&
		(fs.Version == "" || fs.Version == gvk.Version)
}

// splitPath splits a field spec's path at "/", but not at "\/".
func splitPath(path string) []string {
	var out []string
	var cur strings.Builder
	for i := 0; i < len(path); i++ {
		switch {
		case path[i] == '\\' && i+1 < len(path) && path[i+1] == '/':
			cur.WriteByte('/')
			i++
		case path[i] == '/':
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(path[i])
		}
	}
	return append(out, cur.String())
}

// setField sets the field at path under node to value, in every element of
// the lists on the way; a missing field is added only when create is set.
func setField(node any, path []string, value string, create bool) {
	switch n := node.(type) {
	case []any:
		for _, e := range n {
			setField(e, path, value, create)
		}
	case map[string]any:
		key := path[0]
		child, ok := n[key]
		if len(path) == 1 {
			if ok || create {
				n[key] = value
			}
			return
		}
		if !ok {
			if !create {
				return
			}
			child = map[string]any{}
			n[key] = child
		}
		setField(child, path[1:], value, create)
	}
}

// clusterScoped kinds among those deploy/ holds.
var clusterScoped = map[string]bool{"CustomResourceDefinition": true, "ClusterRole": true,
	"ClusterRoleBinding": true, "Namespace": true, "MutatingWebhookConfiguration": true}

func namespaced(o *unstructured.Unstructured) bool { return !clusterScoped[o.GetKind()] }

// setSubjectNamespaces points a binding's ServiceAccount subjects at ns, as
// kustomize does: every one of a RoleBinding's, and those of a
// ClusterRoleBinding that name no namespace, or the namespace that a
// ServiceAccount of the same name among the objects built had before
// (accounts, by name): that is how an overlay's namespace reaches a subject
// its base set. A subject's namespace of another origin is left alone.
func setSubjectNamespaces(o *unstructured.Unstructured, ns string, accounts map[string]string) {
	if o.GetKind() != "RoleBinding" && o.GetKind() != "ClusterRoleBinding" {
		return
	}
	subjects, ok, _ := unstructured.NestedSlice(o.Object, "subjects")
	if !ok {
		return
	}
	for _, s := range subjects {
		m, ok := s.(map[string]any)
		if !ok || m["kind"] != "ServiceAccount" {
			continue
		}
		had, named := m["namespace"]
		prev, isAccount := accounts[fmt.Sprint(m["name"])]
		if o.GetKind() == "RoleBinding" || !named || (isAccount && had == prev) {
			m["namespace"] = ns
		}
	}
	_ = unstructured.SetNestedSlice(o.Object, subjects, "subjects")
}

// replaceImage rewrites containers whose image is name (with any tag).
func replaceImage(o *unstructured.Unstructured, name, newName, newTag string) {
	containers, ok, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if !ok {
		return
	}
	for _, c := range containers {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		img, _ := m["image"].(string)
		base, tag := img, ""
		if i := strings.LastIndex(img, ":"); i > strings.LastIndex(img, "/") {
			base, tag = img[:i], img[i+1:]
		}
		if base != name {
			continue
		}
		if newName != "" {
			base = newName
		}
		if newTag != "" {
			tag = newTag
		}
		if tag != "" {
			m["image"] = base + ":" + tag
		} else {
			m["image"] = base
		}
	}
	_ = unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers")
}

// Applier applies objects with server-side apply.
type Applier struct {
	dyn    dynamic.Interface
	mapper meta.ResettableRESTMapper
}

// NewApplier returns an Applier for the cluster cfg points at.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// Apply applies every object in order (server-side apply, forcing
// conflicts), with defaultNamespace for namespaced objects that have none.
// A kind the server does not know yet (a CRD applied just before) is looked
// up again after a discovery reset.
func (a *Applier) Apply(ctx context.Context, defaultNamespace string, objs ...*unstructured.Unstructured) error {
	return a.apply(ctx, defaultNamespace, nil, objs)
}

// DryRun is Apply with a server-side dry run (`kubectl apply --server-side
// --dry-run=server`): the server validates, defaults and admits every object,
// and stores none. Objects of a kind the server does not serve yet (a CRD
// in the same list) fail; dry-run the CRD and apply it first.
func (a *Applier) DryRun(ctx context.Context, defaultNamespace string, objs ...*unstructured.Unstructured) error {
	return a.apply(ctx, defaultNamespace, []string{metav1.DryRunAll}, objs)
}

func (a *Applier) apply(ctx context.Context, defaultNamespace string, dryRun []string, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		ri, err := a.resource(o, defaultNamespace)
		if err != nil {
			return err
		}
		data, err := o.MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: FieldManager, Force: ptrTrue(), DryRun: dryRun}); err != nil {
			return fmt.Errorf("apply %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// Missing returns the objects of objs that do not exist in the cluster, in
// order. A kind the server does not serve counts as missing.
func (a *Applier) Missing(ctx context.Context, defaultNamespace string, objs ...*unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		ri, err := a.resource(o, defaultNamespace)
		if meta.IsNoMatchError(err) {
			out = append(out, o)
			continue
		}
		if err != nil {
			return nil, err
		}
		_, err = ri.Get(ctx, o.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, o)
		case err != nil:
			return nil, fmt.Errorf("get %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return out, nil
}

// Delete deletes the objects in reverse order (the dependents a manifest
// lists after what they need go first) and waits until each is gone (its
// finalizers have run) or ctx ends. Owned objects (a Deployment's pods) are
// left to the garbage collector (background propagation). Objects
// that do not exist, and kinds the server no longer serves, are skipped.
func (a *Applier) Delete(ctx context.Context, defaultNamespace string, objs ...*unstructured.Unstructured) error {
	var errs []error
	for i := len(objs) - 1; i >= 0; i-- {
		o := objs[i]
		ri, err := a.resource(o, defaultNamespace)
		if meta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		bg := metav1.DeletePropagationBackground
		err = ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: &bg})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("delete %s %s: %w", o.GetKind(), o.GetName(), err))
			continue
		}
		if err := waitGone(ctx, ri, o.GetName()); err != nil {
			errs = append(errs, fmt.Errorf("delete %s %s: %w", o.GetKind(), o.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// waitGone polls until the object is gone.
func waitGone(ctx context.Context, ri dynamic.ResourceInterface, name string) error {
	for {
		_, err := ri.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still there: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// resource is the client for o's kind, in o's namespace or defaultNamespace
// when the kind is namespaced. A kind the server does not know yet is looked
// up again after a discovery reset.
func (a *Applier) resource(o *unstructured.Unstructured, defaultNamespace string) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset()
		m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err)
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return a.dyn.Resource(m.Resource), nil
	}
	ns := o.GetNamespace()
	if ns == "" {
		ns = defaultNamespace
	}
	return a.dyn.Resource(m.Resource).Namespace(ns), nil
}

func ptrTrue() *bool { b := true; return &b }
