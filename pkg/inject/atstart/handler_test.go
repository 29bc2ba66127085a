package atstart

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func podRequest(t *testing.T, op admissionv1.Operation, pod *corev1.Pod) *admissionv1.AdmissionRequest {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{
		UID:       "uid-1",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: "team-a",
		Operation: op,
		Object:    runtime.RawExtension{Raw: raw},
	}
}

func TestHandlerPatchesAPodAnExporterWants(t *testing.T) {
	var seen *corev1.Pod
	h := Handler(func(ctx context.Context, pod *corev1.Pod) (Input, bool, error) {
		seen = pod
		return testInput(), true, nil
	})
	pod := newPod(container("app", corev1.EnvVar{Name: JavaToolOptions, Value: "-Dfoo=bar"}))
	pod.Namespace = "" // generateName pods may arrive without one
	resp := h(context.Background(), podRequest(t, admissionv1.Create, pod))
	if !resp.Allowed || resp.UID != "uid-1" {
		t.Fatalf("response = %+v", resp)
	}
	if seen == nil || seen.Namespace != "team-a" {
		t.Errorf("chooser saw %+v, want the request's namespace", seen)
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch type = %v", resp.PatchType)
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(pod)
	out, err := patch.Apply(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `-Dfoo=bar -javaagent:/handlerkit/jmx-agent/opt/handlerkit/jmx-agent.jar=9404:env:HANDLERKIT_JMX_CONFIG`) {
		t.Errorf("patched pod: %s", out)
	}
	if len(resp.Warnings) != 0 {
		t.Errorf("warnings = %q", resp.Warnings)
	}
}

func TestHandlerAlwaysAdmits(t *testing.T) {
	want := func(bool) Chooser {
		return func(context.Context, *corev1.Pod) (Input, bool, error) { return testInput(), true, nil }
	}
	valueFrom := newPod(container("app", corev1.EnvVar{Name: JavaToolOptions, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}))
	for _, tc := range []struct {
		name    string
		choose  Chooser
		req     func(t *testing.T) *admissionv1.AdmissionRequest
		warning string
	}{
		{"update", want(true), func(t *testing.T) *admissionv1.AdmissionRequest {
			return podRequest(t, admissionv1.Update, newPod(container("app")))
		}, ""},
		{"not a pod", want(true), func(t *testing.T) *admissionv1.AdmissionRequest {
			r := podRequest(t, admissionv1.Create, newPod(container("app")))
			r.Kind.Kind = "ConfigMap"
			return r
		}, ""},
		{"a subresource", want(true), func(t *testing.T) *admissionv1.AdmissionRequest {
			r := podRequest(t, admissionv1.Create, newPod(container("app")))
			r.SubResource = "binding"
			return r
		}, ""},
		{"garbage", want(true), func(t *testing.T) *admissionv1.AdmissionRequest {
			r := podRequest(t, admissionv1.Create, newPod(container("app")))
			r.Object.Raw = []byte("{not json")
			return r
		}, "handlerkit: not injected at start: cannot decode the pod"},
		{"no exporter wants it", func(context.Context, *corev1.Pod) (Input, bool, error) { return Input{}, false, nil },
			func(t *testing.T) *admissionv1.AdmissionRequest {
				return podRequest(t, admissionv1.Create, newPod(container("app")))
			}, ""},
		{"chooser error", func(context.Context, *corev1.Pod) (Input, bool, error) {
			return Input{}, false, errors.New("cache not synced")
		},
			func(t *testing.T) *admissionv1.AdmissionRequest {
				return podRequest(t, admissionv1.Create, newPod(container("app")))
			}, "handlerkit: not injected at start: cache not synced"},
		{"unusable input", func(context.Context, *corev1.Pod) (Input, bool, error) {
			in := testInput()
			in.Port = 0
			return in, true, nil
		}, func(t *testing.T) *admissionv1.AdmissionRequest {
			return podRequest(t, admissionv1.Create, newPod(container("app")))
		}, "handlerkit: not injected at start by exporter demo: atstart: port 0"},
		{"nothing injectable", want(true), func(t *testing.T) *admissionv1.AdmissionRequest {
			return podRequest(t, admissionv1.Create, valueFrom)
		}, "handlerkit: container app sets JAVA_TOOL_OPTIONS from valueFrom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req(t)
			resp := Handler(tc.choose)(context.Background(), req)
			if !resp.Allowed || resp.UID != "uid-1" {
				t.Errorf("response = %+v, want allowed", resp)
			}
			// A pod that an exporter wanted and that is left without the
			// agent is annotated with why (the warning's words); any other
			// pod is left exactly as it is.
			wantNotes := tc.warning != "" && req.Kind.Kind == "Pod" && json.Valid(req.Object.Raw)
			switch {
			case !wantNotes && (resp.Patch != nil || resp.PatchType != nil):
				t.Errorf("response = %+v, want no patch", resp)
			case wantNotes:
				if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
					t.Fatalf("patch type = %v, want JSONPatch", resp.PatchType)
				}
				patch, err := jsonpatch.DecodePatch(resp.Patch)
				if err != nil {
					t.Fatal(err)
				}
				out, err := patch.Apply(req.Object.Raw)
				if err != nil {
					t.Fatal(err)
				}
				var got, want corev1.Pod
				if err := json.Unmarshal(out, &got); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(req.Object.Raw, &want); err != nil {
					t.Fatal(err)
				}
				notes := got.Annotations[AnnotationNotes]
				if !strings.HasPrefix("handlerkit: "+notes, tc.warning) {
					t.Errorf("annotation %s = %q, want the warning %q", AnnotationNotes, notes, tc.warning)
				}
				delete(got.Annotations, AnnotationNotes)
				if len(got.Annotations) == 0 {
					got.Annotations = nil
				}
				if !equality.Semantic.DeepEqual(got, want) {
					t.Errorf("the patch changes more than the notes annotation: %s", resp.Patch)
				}
			}
			if tc.warning == "" && len(resp.Warnings) != 0 || tc.warning != "" && (len(resp.Warnings) != 1 || !strings.HasPrefix(resp.Warnings[0], tc.warning)) {
				t.Errorf("warnings = %q, want %q", resp.Warnings, tc.warning)
			}
		})
	}
	if resp := Handler(want(true))(context.Background(), nil); !resp.Allowed {
		t.Errorf("nil request: %+v", resp)
	}
}

func TestWarningsAreFewAndShort(t *testing.T) {
	notes := []string{strings.Repeat("é", 300), "b", "c", "d", "e", "f"}
	w := warnings(notes)
	if len(w) != 5 || w[4] != "handlerkit: and 2 more" {
		t.Errorf("warnings = %q", w)
	}
	if len(w[0]) > maxWarningLen || !strings.HasSuffix(w[0], "...") || !utf8.ValidString(w[0]) {
		t.Errorf("first warning is %d bytes: %q", len(w[0]), w[0])
	}
}
