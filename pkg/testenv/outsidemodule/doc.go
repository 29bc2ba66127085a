// Package outsidemodule holds TestControlPlaneFromAnotherModuleBuildsItsBinaries,
// the promise to operator authors that a module outside this repository,
// with nothing but the Go toolchain, gets a working control plane from
// pkg/testenv. It has no API. It lives apart from pkg/testenv's own tests
// because it starts no node: pkg/testenv's tests start cluster-mode nodes
// and so run in `make test`'s node lane, one package at a time, while this
// package, mostly a link of kube-apiserver and etcd, runs beside them.
package outsidemodule
