// Package sdktest runs handlers' reads and writes in memory, so that a
// handler can be unit tested without an API server.
//
// A Client implements both query.Interface and action.Interface. Write the
// handler against those interfaces, give it query.For(op) and
// action.For(op) in the operator and a Client in its tests:
//
//	c, err := sdktest.NewClient(sdktest.WithObjects(existing...))
//	err = myHandler{read: c, write: c}.Handle(ctx, event)
//	err = c.Get(ctx, &got) // assert on what the handler wrote
//
// The Client honours the API server's semantics that handlers rely on, and
// a contract test runs the same operations against a real kube-apiserver
// and the Client to prove it:
//
//   - Objects are copied in and out: mutating an object after Create, or
//     what Get returned, never changes the store.
//   - A missing object is apierrors.IsNotFound, an existing name on Create
//     is IsAlreadyExists, and Update, UpdateStatus and Patch with a stale
//     resourceVersion are IsConflict, as are Delete preconditions that do
//     not hold and an Update carrying another object's uid.
//   - Every write that changes the object gets a new resourceVersion from
//     one counter; a write that changes nothing keeps it. Create sets uid,
//     creationTimestamp and, for objects with a spec and for custom
//     resources, generation 1; a change outside metadata and status
//     increments generation.
//   - An object with finalizers is not removed by Delete: it gets a
//     deletionTimestamp (and its generation, if any, is incremented), and
//     it goes away when a write removes its last finalizer. Finalizers
//     cannot be added to an object being deleted (IsInvalid).
//   - List filters by namespace and by query.WithLabelSelector or
//     query.MatchingLabels, sorted by namespace and name.
//   - Typed objects (from the scheme) and *unstructured.Unstructured ones
//     read and write the same store, as they do on a real server.
//   - Kinds outside client-go's built-in scheme (your CRDs) need a
//     resourceVersion on Update (IsInvalid without one) and refuse a
//     strategic merge patch (IsUnsupportedMediaType), as custom resources
//     do.
//
// What it approximates, and so what still needs an integration test
// against pkg/testenv:
//
//   - Every kind is treated as having a status subresource: Create, Update
//     and Patch keep the stored status; UpdateStatus, and Patch with
//     action.WithSubresource("status"), change only status. Server-side
//     apply to the status subresource is not modelled (an error), and
//     other subresources are IsNotFound.
//   - Server-side apply (action.ApplyPatch) is modelled for one field
//     manager per object: it creates a missing object, removes the fields
//     that the manager applied last time and no longer applies, and merges
//     the rest in, maps key by key, lists whole. Other writers' ownership
//     is not tracked: no conflicts between managers, Force changes
//     nothing, and managedFields are never stored.
//   - No validation, defaulting or admission: a Deployment without
//     containers is accepted, and nothing checks that a namespace exists.
//   - No controllers: no garbage collector (propagation policies are
//     accepted and ignored, dependents are not deleted), no graceful
//     deletion (grace periods are ignored), no status written by anyone
//     but the handler.
//   - Each API version is a collection of its own: there is no conversion
//     between versions of a kind.
//   - query.Live() is accepted and changes nothing: the store is always
//     current. A handler that reads its own writes back from the informer
//     cache in production may see them late there; here it sees them at
//     once.
//   - query.FromWatch(name) is accepted and reads the whole store: there are
//     no watches, so no selectors or transforms narrow what it returns.
//   - DryRun() computes the reply and stores nothing.
package sdktest
