// Package v1alpha1 is version v1alpha1 of the cache.example.handlerkit.dev API
// group, the API of handlerkit's memcached example operator.
//
// Its one kind, Memcached, asks the operator for a Deployment of spec.size
// memcached servers and reports the pods that serve them in status.nodes.
//
// types.go is the source of truth: deepcopy (zz_generated.deepcopy.go),
// registration (zz_generated.register.go), the typed clients in
// examples/memcached-operator/pkg/generated and the CRD in
// examples/memcached-operator/deploy/crds are generated from it by
// `make codegen`, like the main API's.
//
// +k8s:deepcopy-gen=package
// +groupName=cache.example.handlerkit.dev
package v1alpha1
