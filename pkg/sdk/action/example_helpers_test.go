package action_test

import (
	"context"
	"fmt"
	"log"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
)

// Keeping an owned ConfigMap as a Deployment wants it. The read comes from
// the cache when the ConfigMaps are watched, and nothing is written while
// the ConfigMap is already right. Nil reader and writer use the handling's
// Operator.
func ExampleCreateOrUpdate() {
	sdk.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		d := e.Object.(*appsv1.Deployment)
		if e.Deleted {
			return nil // the garbage collector deletes what it owned
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name + "-settings"}}
		result, err := action.CreateOrUpdate(ctx, nil, nil, cm, func() error {
			cm.Data = map[string]string{"replicas": fmt.Sprint(*d.Spec.Replicas)}
			return action.SetControllerReference(d, cm, nil)
		})
		if err != nil {
			return err // a Conflict or AlreadyExists is retried from fresh state
		}
		sdk.LoggerFrom(ctx).WithField("result", result).Debug("settings reconciled")
		return nil
	}))
}

// CreateOrPatch sends only what mutate changed, so labels and data that
// others manage on the same object are left alone.
func ExampleCreateOrPatch() {
	sdk.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shared"}}
		_, err := action.CreateOrPatch(ctx, nil, nil, cm, func() error {
			if cm.Labels == nil {
				cm.Labels = map[string]string{}
			}
			cm.Labels["example.dev/managed"] = "true"
			return nil
		})
		return err
	}))
}

// An owner reference that makes a Deployment the controller of a Secret:
// the Secret is deleted with it, and WithOwnerOf watches wake it. A second
// controller is refused.
func ExampleSetControllerReference() {
	var op *sdk.Operator // from sdk.New
	var owner *appsv1.Deployment
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: owner.Namespace, Name: owner.Name + "-token"}}
	if err := action.SetControllerReference(owner, secret, op.Scheme()); err != nil {
		log.Fatal(err) // an *action.AlreadyOwnedError names the current controller
	}
	if err := action.For(op).Create(context.Background(), secret); err != nil {
		log.Fatal(err)
	}
}

// A finalizer gives the handler a chance to clean up outside the cluster
// before the object goes. Adding and removing it cannot drop another
// controller's finalizer: a stale object fails with a Conflict, and the
// handler's retry reads it again.
func ExampleAddFinalizer() {
	const finalizer = "example.dev/cleanup"
	sdk.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		cm := e.Object.(*corev1.ConfigMap)
		switch {
		case e.Deleted:
			return nil // gone: its finalizer was removed below
		case cm.DeletionTimestamp.IsZero():
			_, err := action.AddFinalizer(ctx, nil, cm, finalizer)
			return err
		case action.HasFinalizer(cm, finalizer):
			sdk.LoggerFrom(ctx).Info("cleaning up what the configmap configured outside the cluster")
			_, err := action.RemoveFinalizer(ctx, nil, cm, finalizer)
			return err
		}
		return nil
	}))
}

// Reporting what the handler observed in the status subresource. A stale
// cached object is retried on the live one; an unchanged status writes
// nothing.
func ExampleUpdateStatusWithRetry() {
	sdk.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		exp := e.Object.(*jmxv1alpha1.PrometheusJmxExporter)
		matched := int32(3) // computed by the handler
		_, err := action.UpdateStatusWithRetry(ctx, nil, nil, exp, func() error {
			exp.Status.ObservedGeneration = exp.Generation
			exp.Status.MatchedPods = matched
			return nil
		})
		return err
	}))
}
