package sdktest

import "k8s.io/apimachinery/pkg/runtime/schema"

// MappingOf exposes the resource and scope c gives gvk to the tests.
func MappingOf(c *Client, gvk schema.GroupVersionKind) (schema.GroupVersionResource, bool, error) {
	return c.mapping(gvk)
}
