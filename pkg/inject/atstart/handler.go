package atstart

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// Chooser returns what to inject into a pod being created, and false when no exporter wants the pod at start.
// The operator implements it from its exporters (mode AtStart or Both, selector, containers). The pod's namespace
// is set even when the request's object has none yet.
type Chooser func(ctx context.Context, pod *corev1.Pod) (in Input, ok bool, err error)

// maxWarnings and maxWarningLen keep the warnings short: the API server passes them to the client that created
// the pod (kubectl prints them), and a controller's logs.
const (
	maxWarnings   = 4
	maxWarningLen = 240
)

// Handler returns the webhook handler for pod creation (pkg/webhook serves it): it decodes the pod, asks choose
// what to inject, and answers with Mutate's patch. It always admits the pod: a pod it cannot decode, a choose or
// Mutate error, or another operation than CREATE of a pod gives an allowed response without a patch (a warning
// says why, for errors). Notes become warnings prefixed "handlerkit: ".
func Handler(choose Chooser) func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	return handler(choose, nil)
}

// handler is Handler, and CheckedHandler with a Checker. A dry run whose pod carries AnnotationProbe (the
// Checker's own) is left as it is.
func handler(choose Chooser, checker *Checker) func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	return func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		resp := &admissionv1.AdmissionResponse{Allowed: true}
		if req == nil {
			return resp
		}
		resp.UID = req.UID
		if req.Operation != admissionv1.Create || req.SubResource != "" ||
			req.Kind.Group != "" || req.Kind.Kind != "Pod" {
			return resp
		}
		var pod corev1.Pod
		if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
			resp.Warnings = warnings([]string{"not injected at start: cannot decode the pod: " + err.Error()})
			return resp
		}
		if pod.Namespace == "" {
			pod.Namespace = req.Namespace
		}
		if req.DryRun != nil && *req.DryRun && pod.Annotations[AnnotationProbe] != "" {
			return resp
		}
		in, ok, err := choose(ctx, &pod)
		if err != nil {
			return withNotes(resp, &pod, []string{"not injected at start: " + err.Error()})
		}
		if !ok {
			return resp
		}
		var res Result
		if checker != nil {
			res, err = checker.Deliver(ctx, &pod, in)
		} else {
			res, err = Mutate(&pod, in)
		}
		if err != nil {
			return withNotes(resp, &pod, []string{fmt.Sprintf("not injected at start by exporter %s: %v", in.Exporter, err)})
		}
		if in.Claim != nil && len(res.Injected) > 0 && (req.DryRun == nil || !*req.DryRun) {
			if err := in.Claim(ctx); err != nil {
				return withNotes(resp, &pod, append([]string{fmt.Sprintf("not injected at start by exporter %s: %v", in.Exporter, err)}, res.Notes...))
			}
		}
		resp.Warnings = warnings(res.Notes)
		patch, err := res.PatchJSON()
		if err != nil || patch == nil {
			return resp
		}
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &pt
		return resp
	}
}

// withNotes makes resp warn of notes and annotate the pod with them (AnnotationNotes), so that the operator can
// say in the exporter's status why the pod has no agent.
func withNotes(resp *admissionv1.AdmissionResponse, pod *corev1.Pod, notes []string) *admissionv1.AdmissionResponse {
	resp.Warnings = warnings(notes)
	if patch, err := (Result{Patch: NotesPatch(pod, notes)}).PatchJSON(); err == nil && patch != nil {
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &pt
	}
	return resp
}

func warnings(notes []string) []string {
	var out []string
	for i, n := range notes {
		if i == maxWarnings {
			out = append(out, fmt.Sprintf("handlerkit: and %d more", len(notes)-maxWarnings))
			break
		}
		w := "handlerkit: " + n
		if len(w) > maxWarningLen {
			w = strings.ToValidUTF8(w[:maxWarningLen-3], "") + "..."
		}
		out = append(out, w)
	}
	return out
}
