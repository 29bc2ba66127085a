package action

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/handlerkit/handlerkit/pkg/sdk/internal/convert"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// orWriter returns w, or, when w is nil, a Writer on the Operator that the
// package-level functions use: the one of ctx's handling, else the Default.
func orWriter(ctx context.Context, w Interface) (Interface, error) {
	if w != nil {
		return w, nil
	}
	return writerFor(ctx)
}

// orReader returns r, or, when r is nil, a Reader on the same Operator as
// orWriter.
func orReader(ctx context.Context, r query.Interface) (query.Interface, error) {
	if r != nil {
		return r, nil
	}
	w, err := writerFor(ctx)
	if err != nil {
		return nil, err
	}
	return query.For(w.op), nil
}

// readWriteTarget resolves r and w (see orReader and orWriter) and checks
// that obj is not nil, the common start of the helpers that read and write
// one object.
func readWriteTarget(ctx context.Context, verb string, r query.Interface, w Interface, obj runtime.Object) (query.Interface, Interface, error) {
	r, err := orReader(ctx, r)
	if err != nil {
		return nil, nil, err
	}
	if w, err = orWriter(ctx, w); err != nil {
		return nil, nil, err
	}
	if convert.IsNil(obj) {
		return nil, nil, fmt.Errorf("action: %s: %w", verb, convert.ErrNilObject)
	}
	return r, w, nil
}
