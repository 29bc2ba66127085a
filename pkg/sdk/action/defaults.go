package action

import (
	"context"

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
