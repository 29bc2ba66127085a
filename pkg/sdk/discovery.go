package sdk

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// neverServed reports whether gvk is missing from a built-in API group
// version that the server serves. Built-in groups (those of client-go's
// kubernetes/scheme) gain no kinds at run time, so such a kind, usually a
// typo, can never appear. A kind of another group may still come with a
// CRD, and a group version the server does not serve (yet) may still be
// enabled, so for those it reports false.
func (o *Operator) neverServed(gvk schema.GroupVersionKind) bool {
	if !clientgoscheme.Scheme.IsGroupRegistered(gvk.Group) {
		return false
	}
	resources, err := o.discovery.ServerResourcesForGroupVersion(gvk.GroupVersion().String())
	if err != nil || resources == nil {
		return false
	}
	for _, r := range resources.APIResources {
		if r.Kind == gvk.Kind {
			return false
		}
	}
	return true
}
