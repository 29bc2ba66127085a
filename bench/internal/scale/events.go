package scale

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Events counts the Events of a namespace by the kind of the object they
// are about and their reason ("Pod Injected"), each Event as often as its
// count says (an Event the recorder folded into an earlier one counts too).
type Events map[string]float64

// eventCounts lists the namespace's Events, a page at a time.
func eventCounts(ctx context.Context, kube kubernetes.Interface, ns string) (Events, error) {
	out := Events{}
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := kube.CoreV1().Events(ns).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("scale: list events: %w", err)
		}
		for _, e := range list.Items {
			out[e.InvolvedObject.Kind+" "+e.Reason] += float64(max(e.Count, 1))
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

// minus returns e - before.
func (e Events) minus(before Events) Events { return difference(e, before) }
