package sdk_test

import (
	"context"
	"log"
	"os"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// Recording Kubernetes Events for the people who run `kubectl describe`.
// The recorder comes from the handler's context; Events about one object
// are aggregated and rate-limited.
func ExampleEventRecorderFrom() {
	sdk.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		d := e.Object.(*appsv1.Deployment)
		if d.Spec.Replicas != nil && *d.Spec.Replicas == 0 {
			sdk.EventRecorderFrom(ctx).Eventf(d, corev1.EventTypeWarning, "ScaledToZero",
				"deployment %s has no replicas; its exporter is idle", d.Name)
		}
		return nil
	}))
}

// Naming the reporting controller of the Operator's Events. The reporting
// instance is $POD_NAME, set from the downward API, or the host name.
func ExampleWithEventSource() {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		log.Fatal(err)
	}
	op, err := sdk.New(cfg, sdk.WithEventSource("jmx-operator"))
	if err != nil {
		log.Fatal(err)
	}
	// Outside a handler, the Operator's recorder writes while Run runs.
	_ = op.EventRecorder()
}

// A handler for one kind that receives its Go type, with no type switch.
func ExampleTypedHandler() {
	handler := sdk.TypedHandler(func(ctx context.Context, cm *corev1.ConfigMap, e sdk.Event) error {
		if e.Deleted {
			return nil
		}
		sdk.LoggerFrom(ctx).Infof("configmap %s has %d keys", cm.Name, len(cm.Data))
		return nil
	})
	if err := sdk.Watch("v1", "ConfigMap", "default", 0, sdk.WithHandler(handler)); err != nil {
		log.Fatal(err)
	}
}

// One log stream: the Operator's JSON logger also receives what client-go
// logs through klog. WithoutKlogRouting leaves klog's lines where they
// went before: here, with the first Operator.
func ExampleWithoutKlogRouting() {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		log.Fatal(err)
	}
	logger := logrus.New()
	logger.SetFormatter(&logrus.JSONFormatter{})
	// client-go's lines arrive as JSON too, at info, debug and error level.
	if _, err := sdk.New(cfg, sdk.WithLogger(logger)); err != nil {
		log.Fatal(err)
	}
	// A second Operator in the same process that must not take klog over.
	if _, err := sdk.New(cfg, sdk.WithLogger(logrus.WithField("operator", "second")), sdk.WithoutKlogRouting()); err != nil {
		log.Fatal(err)
	}
}
