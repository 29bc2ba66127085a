package action

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
)

// Interface is what handlers write through. *Writer implements it against
// an Operator's API server; pkg/sdk/sdktest implements it in memory for unit
// tests. Take an Interface rather than a *Writer in code you want to test
// without an API server.
type Interface interface {
	// Create creates obj and fills it with the server's reply.
	Create(ctx context.Context, obj runtime.Object, opts ...Option) error
	// Update replaces obj; a stale resourceVersion is a Conflict.
	Update(ctx context.Context, obj runtime.Object, opts ...Option) error
	// UpdateStatus replaces obj's status subresource.
	UpdateStatus(ctx context.Context, obj runtime.Object, opts ...Option) error
	// Patch applies data of type pt to obj.
	Patch(ctx context.Context, obj runtime.Object, pt PatchType, data []byte, opts ...Option) error
	// Delete deletes obj.
	Delete(ctx context.Context, obj runtime.Object, opts ...Option) error
}

var _ Interface = (*Writer)(nil)
