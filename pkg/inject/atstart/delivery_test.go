package atstart

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func requiredAffinity(terms ...[]corev1.NodeSelectorRequirement) *corev1.Affinity {
	var ts []corev1.NodeSelectorTerm
	for _, t := range terms {
		ts = append(ts, corev1.NodeSelectorTerm{MatchExpressions: t})
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: ts}}}
}

func osIs(op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: "kubernetes.io/os", Operator: op, Values: values}
}

// A pod that can only be scheduled on Windows nodes (by nodeSelector or required node affinity, not only spec.os)
// is left alone with a note; one that may run on Linux is injected.
func TestMutateLeavesPodsForWindowsNodesAlone(t *testing.T) {
	zone := corev1.NodeSelectorRequirement{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
	for _, tc := range []struct {
		name     string
		selector map[string]string
		affinity *corev1.Affinity
		leave    string // the note's cause, "" when injected
	}{
		{"nodeSelector windows", map[string]string{"kubernetes.io/os": "windows"}, nil, "nodeSelector kubernetes.io/os=windows"},
		{"affinity In windows", nil, requiredAffinity([]corev1.NodeSelectorRequirement{zone, osIs(corev1.NodeSelectorOpIn, "windows")}), "required node affinity"},
		{"affinity NotIn linux", nil, requiredAffinity([]corev1.NodeSelectorRequirement{osIs(corev1.NodeSelectorOpNotIn, "linux")}), "required node affinity"},
		{"every term windows", nil, requiredAffinity(
			[]corev1.NodeSelectorRequirement{osIs(corev1.NodeSelectorOpIn, "windows")},
			[]corev1.NodeSelectorRequirement{zone, osIs(corev1.NodeSelectorOpIn, "windows")}), "required node affinity"},
		{"nodeSelector linux", map[string]string{"kubernetes.io/os": "linux"}, nil, ""},
		{"affinity In linux or windows", nil, requiredAffinity([]corev1.NodeSelectorRequirement{osIs(corev1.NodeSelectorOpIn, "windows", "linux")}), ""},
		{"one term may be linux", nil, requiredAffinity(
			[]corev1.NodeSelectorRequirement{osIs(corev1.NodeSelectorOpIn, "windows")},
			[]corev1.NodeSelectorRequirement{zone}), ""},
		{"affinity without the os label", nil, requiredAffinity([]corev1.NodeSelectorRequirement{zone}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod(container("app"))
			pod.Spec.NodeSelector = tc.selector
			pod.Spec.Affinity = tc.affinity
			res, err := Mutate(pod, testInput())
			if err != nil {
				t.Fatal(err)
			}
			if tc.leave == "" {
				if len(res.Injected) != 1 {
					t.Errorf("not injected: notes %q", res.Notes)
				}
				return
			}
			leftAlone(t, pod, res)
			if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "runs on Windows") || !strings.Contains(res.Notes[0], tc.leave) {
				t.Errorf("notes = %q, want one that names %q", res.Notes, tc.leave)
			}
		})
	}
}

// The caller's notes (why it chose the delivery) come first in the pod's notes, and the init container gets the
// resources the caller sized.
func TestMutateWritesTheCallersNotesAndInitResources(t *testing.T) {
	in := testInput()
	in.Delivery = DeliveryInitContainer
	in.Notes = []string{"delivery ImageVolume refused by the cluster (x)"}
	in.InitResources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")},
	}
	pod := newPod(container("app"))
	pod.Spec.HostNetwork = true
	got, res := mutate(t, pod, in)
	if len(res.Notes) != 2 || res.Notes[0] != in.Notes[0] {
		t.Errorf("notes = %q", res.Notes)
	}
	if v := got.Annotations[AnnotationNotes]; !strings.HasPrefix(v, in.Notes[0]+"\n") {
		t.Errorf("%s = %q", AnnotationNotes, v)
	}
	ic := got.Spec.InitContainers[0]
	if cpu := ic.Resources.Requests[corev1.ResourceCPU]; cpu.String() != "50m" {
		t.Errorf("init container requests = %v", ic.Resources.Requests)
	}
	if _, ok := ic.Resources.Requests[corev1.ResourceMemory]; ok {
		t.Errorf("init container requests = %v, want only what the caller said", ic.Resources.Requests)
	}
}

func limitRange(items ...corev1.LimitRangeItem) corev1.LimitRange {
	return corev1.LimitRange{Spec: corev1.LimitRangeSpec{Limits: items}}
}

func q(s string) resource.Quantity { return resource.MustParse(s) }

func TestFitLimitRanges(t *testing.T) {
	for _, tc := range []struct {
		name           string
		ranges         []corev1.LimitRange
		reqCPU, limCPU string
		reqMem, limMem string
		err            string
	}{
		{name: "none", reqCPU: "10m", limCPU: "200m", reqMem: "16Mi", limMem: "64Mi"},
		{name: "min cpu 50m", ranges: []corev1.LimitRange{limitRange(corev1.LimitRangeItem{Type: corev1.LimitTypeContainer,
			Min: corev1.ResourceList{corev1.ResourceCPU: q("50m")}})}, reqCPU: "50m", limCPU: "200m", reqMem: "16Mi", limMem: "64Mi"},
		{name: "min above the limit", ranges: []corev1.LimitRange{limitRange(corev1.LimitRangeItem{Type: corev1.LimitTypeContainer,
			Min: corev1.ResourceList{corev1.ResourceMemory: q("128Mi")}})}, reqCPU: "10m", limCPU: "200m", reqMem: "128Mi", limMem: "128Mi"},
		{name: "max cpu 100m", ranges: []corev1.LimitRange{limitRange(corev1.LimitRangeItem{Type: corev1.LimitTypeContainer,
			Max: corev1.ResourceList{corev1.ResourceCPU: q("100m")}})}, reqCPU: "10m", limCPU: "100m", reqMem: "16Mi", limMem: "64Mi"},
		{name: "ratio 2", ranges: []corev1.LimitRange{limitRange(corev1.LimitRangeItem{Type: corev1.LimitTypeContainer,
			MaxLimitRequestRatio: corev1.ResourceList{corev1.ResourceCPU: q("2"), corev1.ResourceMemory: q("2")}})},
			reqCPU: "100m", limCPU: "200m", reqMem: "32Mi", limMem: "64Mi"},
		{name: "pod items are not the container's", ranges: []corev1.LimitRange{limitRange(corev1.LimitRangeItem{Type: corev1.LimitTypePod,
			Min: corev1.ResourceList{corev1.ResourceCPU: q("1")}})}, reqCPU: "10m", limCPU: "200m", reqMem: "16Mi", limMem: "64Mi"},
		{name: "min above max", ranges: []corev1.LimitRange{
			limitRange(corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Min: corev1.ResourceList{corev1.ResourceCPU: q("500m")}}),
			limitRange(corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: corev1.ResourceList{corev1.ResourceCPU: q("300m")}}),
		}, err: "cpu request below min 500m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FitLimitRanges(DefaultInitResources(), tc.ranges)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				l    corev1.ResourceList
				name corev1.ResourceName
				want string
			}{
				{got.Requests, corev1.ResourceCPU, tc.reqCPU}, {got.Limits, corev1.ResourceCPU, tc.limCPU},
				{got.Requests, corev1.ResourceMemory, tc.reqMem}, {got.Limits, corev1.ResourceMemory, tc.limMem},
			} {
				v := c.l[c.name]
				if v.Cmp(q(c.want)) != 0 {
					t.Errorf("%s = %s, want %s (got %+v)", c.name, v.String(), c.want, got)
				}
			}
		})
	}
}

// dryRuns is a fake API server's view of the Checker: it refuses the deliveries named in refuse and counts the
// dry runs by delivery ("" for the pod without the agent).
type dryRuns struct {
	mu     sync.Mutex
	refuse map[Delivery]error
	count  map[Delivery]int
	fail   error         // every dry run fails so
	hold   chan struct{} // when set, each dry run waits for it to close
}

func (d *dryRuns) client() *fake.Clientset {
	cs := fake.NewClientset()
	d.count = map[Delivery]int{}
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca := a.(k8stesting.CreateActionImpl)
		pod := ca.GetObject().(*corev1.Pod)
		if len(ca.CreateOptions.DryRun) == 0 {
			return true, nil, apierrors.NewBadRequest("not a dry run")
		}
		rec, _, _ := ParseRecord(pod)
		if d.hold != nil {
			<-d.hold
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		d.count[rec.Delivery]++
		if d.fail != nil {
			return true, nil, d.fail
		}
		if err := d.refuse[rec.Delivery]; err != nil {
			return true, nil, err
		}
		return true, pod, nil
	})
	return cs
}

func (d *dryRuns) counts() map[Delivery]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[Delivery]int{}
	for k, v := range d.count {
		out[k] = v
	}
	return out
}

func denied(msg string) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", &policyError{msg})
}

type policyError struct{ msg string }

func (e *policyError) Error() string { return e.msg }

func testChecker(t *testing.T, d *dryRuns, now func() time.Time, maxEntries int) *Checker {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	c, err := NewChecker(CheckerOptions{Client: d.client(), MaxEntries: maxEntries, Logger: log, now: now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A refused image volume falls back to the init container; the refusal is remembered per namespace for TTL, so the
// next pods skip that dry run, and forgotten after.
func TestCheckerFallsBackAndRemembersRefusals(t *testing.T) {
	d := &dryRuns{refuse: map[Delivery]error{DeliveryImageVolume: denied("ValidatingAdmissionPolicy 'no-image-volumes' denied request")}}
	now := time.Unix(1000, 0)
	c := testChecker(t, d, func() time.Time { return now }, 0)
	ctx := context.Background()
	for i := range 3 {
		res, err := c.Deliver(ctx, newPod(container("app")), testInput())
		if err != nil {
			t.Fatal(err)
		}
		got := apply(t, newPod(container("app")), res)
		rec, _, _ := ParseRecord(got)
		if rec.Delivery != DeliveryInitContainer {
			t.Fatalf("pod %d: delivery %q, notes %q", i, rec.Delivery, res.Notes)
		}
		if !strings.Contains(got.Annotations[AnnotationNotes], "delivery ImageVolume refused by the cluster") ||
			!strings.Contains(got.Annotations[AnnotationNotes], "no-image-volumes") {
			t.Errorf("pod %d: notes %q", i, got.Annotations[AnnotationNotes])
		}
	}
	if got := d.counts(); got[DeliveryImageVolume] != 1 || got[DeliveryInitContainer] != 1 {
		t.Errorf("dry runs = %v, want the refused delivery tried once, and the admitted one once: the pods have one shape, whose admission stands %s", got, admittedTTL)
	}
	now = now.Add(DefaultVerdictTTL)
	if _, err := c.Deliver(ctx, newPod(container("app")), testInput()); err != nil {
		t.Fatal(err)
	}
	if got := d.counts(); got[DeliveryImageVolume] != 2 || got[DeliveryInitContainer] != 2 {
		t.Errorf("dry runs = %v, want the refusal and the admission forgotten after their TTLs", got)
	}
}

// When every delivery is refused the pod is left without the agent, with a note naming each refusal; the
// refusals are remembered only when the pod without the agent is admitted.
func TestCheckerLeavesThePodAloneWhenEveryDeliveryIsRefused(t *testing.T) {
	d := &dryRuns{refuse: map[Delivery]error{
		DeliveryImageVolume:   denied("no image volumes"),
		DeliveryInitContainer: denied("no -javaagent in JAVA_TOOL_OPTIONS"),
	}}
	c := testChecker(t, d, time.Now, 0)
	pod := newPod(container("app"))
	res, err := c.Deliver(context.Background(), pod, testInput())
	if err != nil {
		t.Fatal(err)
	}
	leftAlone(t, pod, res)
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "no image volumes") || !strings.Contains(res.Notes[0], "no -javaagent") {
		t.Errorf("notes = %q", res.Notes)
	}
	if got := d.counts(); got[""] != 1 {
		t.Errorf("dry runs = %v, want one of the pod without the agent", got)
	}
	if _, ok := c.remembered(verdictKey{"ns", DeliveryInitContainer}); !ok {
		t.Errorf("refusal not remembered though the pod without the agent is admitted")
	}

	// The pod is refused for its own sake: nothing is remembered.
	d2 := &dryRuns{fail: denied("exceeded quota")}
	c2 := testChecker(t, d2, time.Now, 0)
	if _, err := c2.Deliver(context.Background(), newPod(container("app")), testInput()); err != nil {
		t.Fatal(err)
	}
	if _, ok := c2.remembered(verdictKey{"ns", DeliveryImageVolume}); ok {
		t.Errorf("a refusal of the pod itself was remembered against the delivery")
	}
}

// A dry run that cannot be made (forbidden by RBAC, a timeout) leaves the pod without the agent, with a note:
// never a patch that was not checked.
func TestCheckerLeavesThePodAloneWhenTheDryRunCannotBeMade(t *testing.T) {
	rbac := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "",
		&policyError{`User "system:serviceaccount:x:op" cannot create resource "pods" in API group "" in the namespace "ns"`})
	for _, tc := range []struct {
		name string
		err  error
		note string
	}{
		{"forbidden", rbac, "dry run forbidden"},
		{"timeout", apierrors.NewTimeoutError("slow", 1), "dry run failed"},
		{"a webhook with side effects", apierrors.NewBadRequest(`admission webhook "x" does not support dry run`), "dry run not possible"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &dryRuns{fail: tc.err}
			c := testChecker(t, d, time.Now, 0)
			pod := newPod(container("app"))
			res, err := c.Deliver(context.Background(), pod, testInput())
			if err != nil {
				t.Fatal(err)
			}
			leftAlone(t, pod, res)
			if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], tc.note) {
				t.Errorf("notes = %q, want %q", res.Notes, tc.note)
			}
		})
	}
}

// The memory of refusals is bounded: past MaxEntries namespaces, the entry nearest its end goes.
func TestCheckerMemoryIsBounded(t *testing.T) {
	d := &dryRuns{refuse: map[Delivery]error{DeliveryImageVolume: denied("no")}}
	now := time.Unix(1000, 0)
	c := testChecker(t, d, func() time.Time { return now }, 4)
	for i := range 10 {
		pod := newPod(container("app"))
		pod.Namespace = "ns" + itoa(int32(i))
		now = now.Add(time.Second)
		if _, err := c.Deliver(context.Background(), pod, testInput()); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	n, l := len(c.verdicts), len(c.limits)
	c.mu.Unlock()
	if n > 4 || l > 4 {
		t.Errorf("%d verdicts and %d LimitRange lists remembered, want at most 4 each", n, l)
	}
	if _, ok := c.remembered(verdictKey{"ns9", DeliveryImageVolume}); !ok {
		t.Errorf("the newest refusal was evicted")
	}
}

// The Checker's dry run of a patched pod reaches this same webhook (AdmissionRequest.DryRun): the pod carries the
// injected annotation and is left as it is, and so is the Checker's probe of the pod without the agent. Neither
// makes a dry run of its own.
func TestCheckedHandlerLeavesItsOwnDryRunsAlone(t *testing.T) {
	d := &dryRuns{}
	c := testChecker(t, d, time.Now, 0)
	h := CheckedHandler(func(context.Context, *corev1.Pod) (Input, bool, error) { return testInput(), true, nil }, c)
	res, err := c.Deliver(context.Background(), newPod(container("app")), testInput())
	if err != nil || len(res.Injected) != 1 {
		t.Fatalf("Deliver = %+v, %v", res, err)
	}
	injected := apply(t, newPod(container("app")), res)
	probe := newPod(container("app"))
	probe.Annotations = map[string]string{AnnotationProbe: "true"}
	before := d.counts()[DeliveryImageVolume]
	yes := true
	for name, pod := range map[string]*corev1.Pod{"patched": injected, "probe": probe} {
		raw := mustJSON(t, pod)
		resp := h(context.Background(), &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, DryRun: &yes,
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: "ns", Object: runtime.RawExtension{Raw: []byte(raw)}})
		if !resp.Allowed || len(resp.Patch) != 0 {
			t.Errorf("%s: response %+v, want allowed without a patch", name, resp)
		}
	}
	if got := d.counts(); got[DeliveryImageVolume] != before || got[""] != 0 {
		t.Errorf("dry runs = %v: the webhook's answer to its own dry runs made more", got)
	}
}

// A burst of creations of one shape (a Deployment's pods: the same spec,
// labels and owners, other names) under way at once makes one dry run, whose
// verdict each of them gets; a pod of another shape makes its own. Before,
// each creation made its own dry run: 200 creations in 10 s, each also
// calling the webhook again through its dry run, ran past the webhook's
// deadline on a loaded API server (test/deploy TestABurstOfPodCreationsGetsTheAgentInEveryPod).
func TestCheckerSharesTheDryRunOfPodsOfOneShape(t *testing.T) {
	d := &dryRuns{hold: make(chan struct{})}
	c := testChecker(t, d, time.Now, 0)
	ctx := context.Background()
	const n = 20
	results := make([]Result, n+1)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range n + 1 {
		pod := newPod(container("app"))
		pod.Name = fmt.Sprintf("orders-%02d", i)
		if i == n {
			pod.Labels = map[string]string{"other": "shape"}
		}
		wg.Go(func() { results[i], errs[i] = c.Deliver(ctx, pod, testInput()) })
	}
	// Every creation has asked before any dry run answers: two run, the
	// other n-1 of the first shape wait for theirs.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		running, joined := len(c.running), c.joined
		c.mu.Unlock()
		if running == 2 && joined == n-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d dry runs running, %d creations waiting for one, want 2 and %d", running, joined, n-1)
		}
		time.Sleep(time.Millisecond)
	}
	close(d.hold)
	wg.Wait()
	for i := range n + 1 {
		if errs[i] != nil || len(results[i].Injected) == 0 {
			t.Fatalf("pod %d: %+v, %v; want the agent", i, results[i], errs[i])
		}
	}
	if got := d.counts(); got[DeliveryImageVolume] != 2 {
		t.Errorf("dry runs = %v, want 2: one for the %d pods of one shape, one for the pod of another", got, n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.running) != 0 {
		t.Errorf("%d dry runs still listed as running", len(c.running))
	}
}

// A shape a dry run admitted stands for admittedTTL: the creations of that
// shape meanwhile take its verdict without a dry run (a rollout's burst
// needs one), and the first after it is dry-run again; another shape is
// dry-run on its own.
func TestCheckerRemembersAnAdmittedShapeBriefly(t *testing.T) {
	d := &dryRuns{}
	now := time.Unix(1000, 0)
	c := testChecker(t, d, func() time.Time { return now }, 0)
	ctx := context.Background()
	deliver := func(name string, labels map[string]string) {
		t.Helper()
		pod := newPod(container("app"))
		pod.Name, pod.Labels = name, labels
		res, err := c.Deliver(ctx, pod, testInput())
		if err != nil || len(res.Injected) == 0 {
			t.Fatalf("pod %s: %+v, %v; want the agent", name, res, err)
		}
	}
	for i := range 5 {
		deliver(fmt.Sprintf("orders-%d", i), nil)
	}
	if got := d.counts()[DeliveryImageVolume]; got != 1 {
		t.Errorf("5 pods of one shape: %d dry runs, want 1", got)
	}
	deliver("other", map[string]string{"team": "b"})
	if got := d.counts()[DeliveryImageVolume]; got != 2 {
		t.Errorf("a pod of another shape: %d dry runs in all, want 2", got)
	}
	now = now.Add(admittedTTL)
	deliver("orders-late", nil)
	if got := d.counts()[DeliveryImageVolume]; got != 3 {
		t.Errorf("a pod of the first shape %s later: %d dry runs in all, want 3", admittedTTL, got)
	}
}
