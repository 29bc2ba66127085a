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
//
// # Process-wide state
//
// Importing the package sets two process-wide hooks, once, in its init:
// before any goroutine of the program runs, because every client-go
// request and every klog call of any goroutine reads them without
// synchronisation, so setting them later (in New, say) would race with
// clients and loggers already at work. New itself writes neither.
//
//   - client-go's request metric hooks (k8s.io/client-go/tools/metrics)
//     record every client-go request of the process, the Operators' and
//     any other client's, into the rest_client_* collectors that each
//     Operator registers in its registry. client-go keeps the first
//     registration only: when another package registered first (in an
//     init that ran earlier), its hooks stay, and Operators warn and
//     export no rest_client_* series.
//   - klog's logger is the package's sink. It writes to the logger of
//     the last Operator that New created with klog routing (the default;
//     see WithoutKlogRouting). Until there is one, it writes to stderr in
//     klog's text format, gated by klog's -v and -vmodule as klog gates
//     its lines, so that a program that imports the package and never
//     routes sees what klog would print. The trade: klog's output
//     settings (klog.SetOutput, -logtostderr=false, -log_file, -log_dir,
//     -stderrthreshold, -skip_headers, -add_dir_header) no longer apply,
//     and the lines of klog's printf-style functions (klog.Infof,
//     klog.Warning, ...) are written as klog writes structured messages:
//     quoted, warnings and fatal lines as info. A program that wants klog
//     elsewhere sets its own logger with klog.SetLogger after this
//     package's init and before it starts goroutines, as klog requires;
//     that logger stays, and New warns that it cannot route klog unless
//     given WithoutKlogRouting.
package sdk
