// Package testbin builds, caches and finds the binaries that pkg/testenv
// runs: etcd and the Kubernetes components, containerd and its shim, and the
// Prometheus server, each built from the Go module proxy with the module
// files embedded here (copies of hack/tools, hack/containerd and
// hack/prometheus). It imports nothing beyond the standard library, so that
// cmd/testenv-build, which `make test` runs first on a cold machine, compiles
// in seconds; pkg/testenv re-exports what its users need.
package testbin
