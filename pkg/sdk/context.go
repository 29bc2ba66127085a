package sdk

import "context"

type operatorKey struct{}

// OperatorFrom returns the Operator whose handler runs with ctx, or nil
// outside a handling. Helpers that need the Operator (its event recorder,
// Enqueue, query and action on the right clients) find it this way.
func OperatorFrom(ctx context.Context) *Operator {
	o, _ := ctx.Value(operatorKey{}).(*Operator)
	return o
}

func withOperator(ctx context.Context, o *Operator) context.Context {
	return context.WithValue(ctx, operatorKey{}, o)
}
