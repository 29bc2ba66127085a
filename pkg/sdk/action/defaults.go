package action

import (
	"context"
	"errors"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// errNoOperator is returned by helpers given a nil Interface outside a
// handling.
var errNoOperator = errors.New("action: no reader or writer given, and ctx belongs to no handling (sdk.OperatorFrom(ctx) is nil)")

// writerFor returns w, or a Writer on the Operator of ctx's handling when
// w is nil.
func writerFor(ctx context.Context, w Interface) (Interface, error) {
	if w != nil {
		return w, nil
	}
	if op := sdk.OperatorFrom(ctx); op != nil {
		return For(op), nil
	}
	return nil, errNoOperator
}

// readerFor returns r, or a Reader on the Operator of ctx's handling when
// r is nil.
func readerFor(ctx context.Context, r query.Interface) (query.Interface, error) {
	if r != nil {
		return r, nil
	}
	if op := sdk.OperatorFrom(ctx); op != nil {
		return query.For(op), nil
	}
	return nil, errNoOperator
}
