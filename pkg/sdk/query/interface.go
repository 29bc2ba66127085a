package query

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
)

// Interface is what handlers read through. *Reader implements it against an
// Operator's caches and API server; pkg/sdk/sdktest implements it in memory
// for unit tests. Take an Interface rather than a *Reader in code you want
// to test without an API server.
type Interface interface {
	// Get fills into with the object named by into's namespace and name.
	Get(ctx context.Context, into runtime.Object, opts ...Option) error
	// List fills into, a typed or unstructured list, with the objects in
	// namespace ("" for all).
	List(ctx context.Context, namespace string, into runtime.Object, opts ...Option) error
}

var _ Interface = (*Reader)(nil)
