package sdktest

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/handlerkit/handlerkit/pkg/sdk/internal/convert"
)

// target is a resolved object: its kind, collection and key.
type target struct {
	gvk        schema.GroupVersionKind
	gvr        schema.GroupVersionResource
	namespaced bool
	namespace  string
	name       string
}

func (t *target) key() string {
	if t.namespace == "" {
		return t.name
	}
	return t.namespace + "/" + t.name
}

func (t *target) nn() types.NamespacedName {
	return types.NamespacedName{Namespace: t.namespace, Name: t.name}
}

// builtin reports whether the kind is one of Kubernetes' own, which the
// API server serves with strategic merge patch and unconditional updates;
// custom resources have neither.
func (t *target) builtin() bool { return clientgoscheme.Scheme.Recognizes(t.gvk) }

// mapping returns gvk's resource and whether it is namespaced.
func (c *Client) mapping(gvk schema.GroupVersionKind) (schema.GroupVersionResource, bool, error) {
	if c.mapper != nil {
		m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return schema.GroupVersionResource{}, false, err
		}
		return m.Resource, m.Scope.Name() == meta.RESTScopeNameNamespace, nil
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvk)
	return gvr, !c.clusterScoped[gvk.GroupKind()], nil
}

// resolve finds obj's kind and collection and checks its name and
// namespace the way query.Reader and action.Writer do. needName is false
// only for Create, where generateName may stand in for the name.
func (c *Client) resolve(verb string, obj runtime.Object, needName bool) (*target, error) {
	if convert.IsNil(obj) {
		return nil, fmt.Errorf("sdktest: %s: %w", verb, convert.ErrNilObject)
	}
	gvk, err := convert.KindOf(c.scheme, obj)
	if err != nil {
		return nil, fmt.Errorf("sdktest: %s: %w", verb, err)
	}
	if strings.HasSuffix(gvk.Kind, "List") {
		return nil, fmt.Errorf("sdktest: %s: %s is a list", verb, gvk.Kind)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("sdktest: %s %s: %w", verb, gvk.Kind, err)
	}
	gvr, namespaced, err := c.mapping(gvk)
	if err != nil {
		return nil, fmt.Errorf("sdktest: %s: %w", verb, err)
	}
	t := &target{gvk: gvk, gvr: gvr, namespaced: namespaced, namespace: m.GetNamespace(), name: m.GetName()}
	if t.name == "" && (needName || m.GetGenerateName() == "") {
		if needName {
			return nil, fmt.Errorf("sdktest: %s %s: metadata.name is empty", verb, gvk.Kind)
		}
		return nil, fmt.Errorf("sdktest: %s %s: metadata.name and metadata.generateName are empty", verb, gvk.Kind)
	}
	if !namespaced {
		t.namespace = ""
	} else if t.namespace == "" {
		return nil, fmt.Errorf("sdktest: %s %s %q: metadata.namespace is empty", verb, gvk.Kind, t.name)
	}
	return t, nil
}

// resolveList finds the item kind and collection of a typed or
// unstructured list.
func (c *Client) resolveList(list runtime.Object, namespace string) (listGVK schema.GroupVersionKind, t *target, err error) {
	if convert.IsNil(list) {
		return listGVK, nil, fmt.Errorf("sdktest: list: %w", convert.ErrNilObject)
	}
	listGVK, err = convert.KindOf(c.scheme, list)
	if err != nil {
		return listGVK, nil, fmt.Errorf("sdktest: list: %w", err)
	}
	if !meta.IsListType(list) || !strings.HasSuffix(listGVK.Kind, "List") {
		return listGVK, nil, fmt.Errorf("sdktest: list: %T (%s) is not a list type", list, listGVK.Kind)
	}
	gvk := listGVK.GroupVersion().WithKind(strings.TrimSuffix(listGVK.Kind, "List"))
	gvr, namespaced, err := c.mapping(gvk)
	if err != nil {
		return listGVK, nil, fmt.Errorf("sdktest: list: %w", err)
	}
	if !namespaced && namespace != "" {
		return listGVK, nil, fmt.Errorf("sdktest: list %s: kind is cluster-scoped; namespace must be empty, not %q", gvk.Kind, namespace)
	}
	return listGVK, &target{gvk: gvk, gvr: gvr, namespaced: namespaced, namespace: namespace}, nil
}

var errSelectorOnGet = errors.New("sdktest: label selectors apply to List, not Get")

// builtinClusterScoped are the cluster-scoped kinds Kubernetes v1.36
// serves; a test compares them with a real API server's discovery.
var builtinClusterScoped = map[schema.GroupKind]bool{
	{Group: "", Kind: "ComponentStatus"}:                                              true,
	{Group: "", Kind: "Namespace"}:                                                    true,
	{Group: "", Kind: "Node"}:                                                         true,
	{Group: "", Kind: "PersistentVolume"}:                                             true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}:          true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicyBinding"}:   true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   true,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:                 true,
	{Group: "apiregistration.k8s.io", Kind: "APIService"}:                             true,
	{Group: "authentication.k8s.io", Kind: "SelfSubjectReview"}:                       true,
	{Group: "authentication.k8s.io", Kind: "TokenReview"}:                             true,
	{Group: "authorization.k8s.io", Kind: "SelfSubjectAccessReview"}:                  true,
	{Group: "authorization.k8s.io", Kind: "SelfSubjectRulesReview"}:                   true,
	{Group: "authorization.k8s.io", Kind: "SubjectAccessReview"}:                      true,
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}:                 true,
	{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle"}:                        true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"}:                       true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"}:       true,
	{Group: "internal.apiserver.k8s.io", Kind: "StorageVersion"}:                      true,
	{Group: "networking.k8s.io", Kind: "IngressClass"}:                                true,
	{Group: "networking.k8s.io", Kind: "IPAddress"}:                                   true,
	{Group: "networking.k8s.io", Kind: "ServiceCIDR"}:                                 true,
	{Group: "node.k8s.io", Kind: "RuntimeClass"}:                                      true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:                         true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:                  true,
	{Group: "resource.k8s.io", Kind: "DeviceClass"}:                                   true,
	{Group: "resource.k8s.io", Kind: "DeviceTaintRule"}:                               true,
	{Group: "resource.k8s.io", Kind: "ResourceSlice"}:                                 true,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:                               true,
	{Group: "storage.k8s.io", Kind: "CSIDriver"}:                                      true,
	{Group: "storage.k8s.io", Kind: "CSINode"}:                                        true,
	{Group: "storage.k8s.io", Kind: "StorageClass"}:                                   true,
	{Group: "storage.k8s.io", Kind: "VolumeAttachment"}:                               true,
	{Group: "storage.k8s.io", Kind: "VolumeAttributesClass"}:                          true,
	{Group: "storagemigration.k8s.io", Kind: "StorageVersionMigration"}:               true,
}
