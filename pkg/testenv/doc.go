// Package testenv starts a real Kubernetes control plane for tests: etcd and
// kube-apiserver, built from the Go module proxy, listening on loopback with
// temporary data and certificate directories.
//
// It is handlerkit's answer to controller-runtime's envtest and needs nothing
// beyond Go. A test starts an Environment, talks to it through the admin
// rest.Config or through credentials minted for any user, group or
// ServiceAccount (authorization mode RBAC is real), installs CRDs, and stops it:
//
//	func TestSomething(t *testing.T) {
//		env := testenv.New(t) // stopped by t.Cleanup
//		client := env.Clientset()
//		...
//	}
//
// Binaries are looked up in $HANDLERKIT_BIN_DIR, then in
// ${XDG_CACHE_HOME:-$HOME/.cache}/handlerkit/controlplane/v1.36.3. When they
// are missing, Start builds them from the Go module proxy with the go command
// (minutes, once per machine; see EnsureBinaries), from any module that
// imports this package: the pinned versions, replace lines and version
// ldflags are embedded here. cmd/testenv-build does the same ahead of time.
//
// WriteKubeconfig and KubeconfigFile write a kubeconfig for the admin
// identity, for tools and for code that reads $KUBECONFIG.
//
// With HANDLERKIT_TEST_KUBECONFIG set, Start starts nothing and uses the
// cluster that kubeconfig points at; credentials for other users are then
// made by impersonation.
//
// Every process started here dies with the test binary (Pdeathsig), and Stop
// removes every directory, also when the test failed or panicked.
//
// Cluster mode (WithNode) adds kube-controller-manager, kube-scheduler,
// containerd with runc and CNI bridge networking, and a kubelet, so that pods
// really run: exec, logs, ephemeral containers and pod IPs work. It needs root
// (ErrNodeUnsupported names what is missing), runs one node per machine at a
// time, loads images from archives (WithImageArchives, LoadImageArchive; see
// package images) and on Stop leaves no process, mount, network namespace,
// link or cgroup behind. WithServiceProxy adds a real kube-proxy and moves
// the apiserver onto the node's bridge, so that pods reach it through
// rest.InClusterConfig (the kubernetes Service, 10.0.0.1:443) and other
// ClusterIP Services work.
//
// Package testenv/prometheus runs a real Prometheus server against an
// Environment; its binary is built and cached here like the cluster's
// (PrometheusVersion, PrometheusDir). docs/testenv.md describes it all in
// full.
package testenv
