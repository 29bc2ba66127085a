package sdk_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

func cm(gen int64, labels, annotations map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: gen, Labels: labels, Annotations: annotations}}
}

func TestPredicates(t *testing.T) {
	base := cm(1, map[string]string{"a": "1"}, map[string]string{"n": "1"})
	cases := []struct {
		name string
		p    sdk.Predicate
		typ  sdk.EventType
		old  runtime.Object
		obj  runtime.Object
		want bool
	}{
		{"generation: add passes", sdk.GenerationChanged(), sdk.EventAdd, nil, base, true},
		{"generation: delete passes", sdk.GenerationChanged(), sdk.EventDelete, nil, base, true},
		{"generation: resync dropped", sdk.GenerationChanged(), sdk.EventResync, base, base, false},
		{"generation: same dropped", sdk.GenerationChanged(), sdk.EventUpdate, base, cm(1, nil, nil), false},
		{"generation: bumped passes", sdk.GenerationChanged(), sdk.EventUpdate, base, cm(2, map[string]string{"a": "1"}, nil), true},
		{"labels: changed passes", sdk.LabelsChanged(), sdk.EventUpdate, base, cm(1, map[string]string{"a": "2"}, map[string]string{"n": "1"}), true},
		{"labels: same dropped", sdk.LabelsChanged(), sdk.EventUpdate, base, cm(2, map[string]string{"a": "1"}, map[string]string{"n": "2"}), false},
		{"annotations: changed passes", sdk.AnnotationsChanged(), sdk.EventUpdate, base, cm(1, map[string]string{"a": "1"}, nil), true},
		{"annotations: same dropped", sdk.AnnotationsChanged(), sdk.EventUpdate, base, cm(5, nil, map[string]string{"n": "1"}), false},
		{"labels or annotations: annotation change passes", sdk.LabelsOrAnnotationsChanged(), sdk.EventUpdate, base, cm(1, map[string]string{"a": "1"}, map[string]string{"n": "2"}), true},
		{"labels or annotations: neither dropped", sdk.LabelsOrAnnotationsChanged(), sdk.EventUpdate, base, cm(3, map[string]string{"a": "1"}, map[string]string{"n": "1"}), false},
		{"ignore resync: resync dropped", sdk.IgnoreResync(), sdk.EventResync, base, base, false},
		{"ignore resync: update passes", sdk.IgnoreResync(), sdk.EventUpdate, base, base, true},
		{"and: one false drops", sdk.And(sdk.IgnoreResync(), sdk.LabelsChanged()), sdk.EventUpdate, base, base, false},
		{"and: all true passes", sdk.And(sdk.IgnoreResync(), sdk.GenerationChanged()), sdk.EventAdd, nil, base, true},
		{"or: one true passes", sdk.Or(sdk.LabelsChanged(), sdk.GenerationChanged()), sdk.EventUpdate, base, cm(2, map[string]string{"a": "1"}, nil), true},
		{"or: none true drops", sdk.Or(sdk.LabelsChanged(), sdk.GenerationChanged()), sdk.EventUpdate, base, base, false},
		{"not: inverts", sdk.Not(sdk.IgnoreResync()), sdk.EventResync, base, base, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.p(c.old, sdk.Event{Object: c.obj, Type: c.typ, Deleted: c.typ == sdk.EventDelete}); got != c.want {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}
