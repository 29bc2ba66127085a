package contender

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/bench/internal/probe"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
)

// runRawWatch opens one watch on the namespace and counts what arrives: with
// no resourceVersion the server first sends the objects that exist as ADDED
// events, then every change. It decodes each event (to learn the object's
// name and generation) and keeps nothing. A closed stream is reopened from
// the last resourceVersion seen; an expired one from the start.
func runRawWatch(ctx context.Context, cfg *rest.Config, spec Spec, rec *probe.Recorder) error {
	var open func(context.Context, metav1.ListOptions) (watch.Interface, error)
	if spec.Kind == KindPods {
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		open = kube.CoreV1().Pods(spec.Namespace).Watch
	} else {
		jmxClient, err := versioned.NewForConfig(cfg)
		if err != nil {
			return err
		}
		open = jmxClient.JmxV1alpha1().PrometheusJmxExporters(spec.Namespace).Watch
	}
	rv := ""
	for ctx.Err() == nil {
		w, err := open(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		rv = consume(ctx, w, rv, rec)
	}
	return nil
}

// consume counts the events of w until it ends and returns the
// resourceVersion to resume from.
func consume(ctx context.Context, w watch.Interface, rv string, rec *probe.Recorder) string {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return rv
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv
			}
			if ev.Type == watch.Error {
				return "" // expired: start over from the current state
			}
			m, err := meta.Accessor(ev.Object)
			if err != nil {
				continue
			}
			rv = m.GetResourceVersion()
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				rec.Called(m.GetName(), probe.Stamp(m.GetAnnotations()))
				rec.Handled(m.GetName(), m.GetGeneration())
			}
		}
	}
}
