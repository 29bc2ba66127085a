// Package sdk is a framework for Kubernetes operators in the event-driven
// style of the early operator-sdk: register watches, give a Handler, Run.
//
//	sdk.Watch("apps/v1", "Deployment", "default", 0)
//	sdk.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error { ... }))
//	err := sdk.Run(ctx)
//
// The package-level functions are thin wrappers over Default; programs that
// need options or tests that need isolation build an Operator with New.
//
// Each watch runs an informer whose notifications enqueue the object's key
// (namespace/name) in a named, rate-limited workqueue. Workers take keys and
// call the Handler with a copy of the latest cached state, so handling
// is level-driven and a key is never handled twice at once. Deletes carry the
// final known state. Errors retry with backoff; RequeueAfter and Terminal
// steer retries; panics are recovered.
//
// Reads go through package query (from the cache for watched kinds) and
// writes through package action. Metrics are registered in a
// prometheus.Registerer and served with /healthz and /readyz by package
// metrics.
//
// Handlers record Kubernetes Events with EventRecorderFrom(ctx), and a
// handler for one kind can take its Go type through TypedHandler. What
// client-go logs through klog goes to the Operator's logger.
package sdk
