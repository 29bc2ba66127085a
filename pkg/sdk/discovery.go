package sdk

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// DiscoveryResetInterval is the least time between two refreshes of the
// Operator's discovery cache. A lookup of a kind the cache does not know
// refreshes it, so that CRDs installed after start are found, but a handler
// that reads a missing kind on every event must not fetch the whole of
// discovery each time: within the interval, a miss is answered from the
// cache. A CRD installed meanwhile is found at the next refresh.
const DiscoveryResetInterval = 5 * time.Second

// mayResetDiscovery reports whether the discovery cache may be refreshed
// now, and if so records the refresh.
func (o *Operator) mayResetDiscovery() bool {
	o.discoveryMu.Lock()
	defer o.discoveryMu.Unlock()
	if !o.discoveryReset.IsZero() && time.Since(o.discoveryReset) < DiscoveryResetInterval {
		return false
	}
	o.discoveryReset = time.Now()
	return true
}

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
	gvServed, kindServed := o.mapper.served(gvk)
	return gvServed && !kindServed
}
