package e2e

import "github.com/handlerkit/handlerkit/pkg/testenv"

// envOptions are the cluster's options: a real node.
func envOptions() []testenv.Option {
	return []testenv.Option{testenv.WithNode()}
}
