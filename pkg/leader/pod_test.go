package leader

import (
	"maps"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestOperatorLabelsDropLeaderAndRevisionLabels(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
		"app": "op", "tier": "control", "leader": "true", "pod-template-hash": "abc", "controller-revision-hash": "x",
	}}}
	got := OperatorLabels(pod, "leader")
	want := map[string]string{"app": "op", "tier": "control"}
	if !maps.Equal(got, want) {
		t.Errorf("OperatorLabels = %v, want %v", got, want)
	}
	if selectorFor(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"leader": "true"}}}, "leader") != nil {
		t.Error("a pod with only the leader label must not yield a selector (it would match every pod)")
	}
}

func TestIsStaleOwner(t *testing.T) {
	cases := []struct {
		phase  corev1.PodPhase
		reason string
		stale  bool
	}{
		{corev1.PodRunning, "", false},
		{corev1.PodPending, "", false},
		{"", "", false},
		{corev1.PodFailed, "", true},
		{corev1.PodSucceeded, "", true},
		{corev1.PodFailed, "Evicted", true},
		{corev1.PodRunning, "Evicted", true},
	}
	for _, tc := range cases {
		pod := &corev1.Pod{Status: corev1.PodStatus{Phase: tc.phase, Reason: tc.reason}}
		if got, _ := isStaleOwner(pod); got != tc.stale {
			t.Errorf("phase %q reason %q: stale = %v, want %v", tc.phase, tc.reason, got, tc.stale)
		}
	}
}

// TestPackageDocListsPolicyRules keeps the RBAC list in the package comment, which people copy into manifests,
// identical to PolicyRules, which the RBAC test proves sufficient.
func TestPackageDocListsPolicyRules(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	for _, r := range PolicyRules() {
		group := `""`
		if r.APIGroups[0] != "" {
			group = r.APIGroups[0]
		}
		found := false
		for _, l := range lines {
			f := strings.Fields(strings.TrimPrefix(l, "//"))
			if len(f) >= 3 && f[0] == group && f[1] == r.Resources[0] {
				verbs := strings.Join(f[2:], " ")
				if i := strings.Index(verbs, "("); i >= 0 {
					verbs = verbs[:i]
				}
				if got, want := strings.TrimSpace(verbs), strings.Join(r.Verbs, ", "); got != want {
					t.Errorf("doc lists %s %s verbs %q, PolicyRules has %q", group, r.Resources[0], got, want)
				}
				found = true
			}
		}
		if !found {
			t.Errorf("doc.go does not list %s %s", group, r.Resources[0])
		}
	}
}
