package intern

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStringsRecoversAndLeavesTheObjectEqual(t *testing.T) {
	orig := canonical
	t.Cleanup(func() { canonical = orig })
	calls := 0
	canonical = func(s string, h uint64) string {
		if calls++; calls > 3 {
			panic("unexpected")
		}
		return orig(s, h)
	}
	// Without a uid or a name, every string of the object is interned,
	// whatever was seen before.
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Labels: map[string]string{"app": "web", "tier": "backend"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:1", Args: []string{"-v", "--port=8080"}}}},
	}
	want := p.DeepCopy()
	err := Strings(p)
	if err == nil || !strings.Contains(err.Error(), "unexpected") {
		t.Fatalf("Strings = %v, want the recovered panic", err)
	}
	if calls <= 3 {
		t.Fatalf("the walk stopped after %d strings; the panic was not reached mid-object", calls)
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("object after a failed walk:\n got %#v\nwant %#v", p, want)
	}
}
