package e2e

import "github.com/handlerkit/handlerkit/pkg/testenv"

// envOptions are the cluster's options: a real node, and Services that work
// from pods (a real kube-proxy), so that the operator runs in the cluster with
// the standard in-cluster configuration.
func envOptions() []testenv.Option {
	return []testenv.Option{testenv.WithServiceProxy()}
}
