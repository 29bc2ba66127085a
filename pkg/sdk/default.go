package sdk

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

var (
	defaultMu sync.Mutex
	defaultOp *Operator
)

// Default returns the Operator behind the package-level Watch, Handle and
// Run, creating it on first use from the in-cluster configuration or, outside
// a cluster, from $KUBECONFIG (or ~/.kube/config). A failure is returned, not
// remembered: the next call tries again.
func Default() (*Operator, error) {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	if defaultOp != nil {
		return defaultOp, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("sdk: no in-cluster config and no usable kubeconfig: %w", err)
		}
	}
	op, err := New(cfg)
	if err != nil {
		return nil, err
	}
	defaultOp = op
	return op, nil
}

// SetDefault makes op the Operator behind the package-level functions, for
// programs that need options on it. It must be called before them.
func SetDefault(op *Operator) {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	defaultOp = op
}

// Watch calls Watch on the Default Operator.
func Watch(apiVersion, kind, namespace string, resyncPeriod time.Duration, opts ...WatchOption) error {
	op, err := Default()
	if err != nil {
		return err
	}
	return op.Watch(apiVersion, kind, namespace, resyncPeriod, opts...)
}

// Handle sets the handler of the Default Operator. When the Default Operator
// cannot be created, Handle does nothing and Run reports the error.
func Handle(h Handler) {
	if op, err := Default(); err == nil {
		op.Handle(h)
	}
}

// Run calls Run on the Default Operator.
func Run(ctx context.Context) error {
	op, err := Default()
	if err != nil {
		return err
	}
	return op.Run(ctx)
}
