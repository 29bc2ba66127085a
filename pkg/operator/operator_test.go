package operator

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/jvm"
)

func TestClassify(t *testing.T) {
	ok := jvm.InjectResult{PID: 10, NSPID: 1, MainClass: "app.jar", Status: jvm.OutcomeOK, Port: 9404,
		StartedAt: time.Unix(1700000000, 0)}
	already := jvm.InjectResult{NSPID: 2, MainClass: "b", Status: jvm.OutcomeAlreadyInjected, Port: 9405}
	fail := func(r jvm.Reason) jvm.InjectResult {
		return jvm.InjectResult{NSPID: 3, MainClass: "c", Status: jvm.OutcomeError, Reason: r, Message: "m", Port: 9406}
	}
	cases := []struct {
		name   string
		out    inject.Outcome
		err    error
		class  string
		reason string
		jvms   int
	}{
		{"unknown outcome", inject.Outcome{}, errors.New("timeout"), resultRetry, "Unknown", 0},
		{"no JVM", inject.Outcome{NoJVM: true}, nil, resultSuccess, jmxv1alpha1.ReasonNoJVMFound, 0},
		{"refused request", inject.Outcome{Detail: "bad"}, nil, resultFailure, "InvalidRequest", 0},
		{"no shell for Exec", inject.Outcome{Refused: inject.ReasonShellNotFound, Detail: "use EphemeralContainer"}, nil, resultFailure, inject.ReasonShellNotFound, 0},
		{"ok and already", inject.Outcome{Results: []jvm.InjectResult{ok, already}}, nil, resultSuccess, "", 2},
		{"attach disabled is permanent", inject.Outcome{Results: []jvm.InjectResult{ok, fail(jvm.ReasonAttachDisabled)}}, nil, resultFailure, jmxv1alpha1.ReasonAttachDisabled, 1},
		{"agent start failed is permanent", inject.Outcome{Results: []jvm.InjectResult{fail(jvm.ReasonAgentStartFailed)}}, nil, resultFailure, jmxv1alpha1.ReasonAgentStartFailed, 0},
		{"port in use is permanent", inject.Outcome{Results: []jvm.InjectResult{fail(jvm.ReasonPortInUse)}}, nil, resultFailure, jmxv1alpha1.ReasonPortInUse, 0},
		{"dynamic loading disabled", inject.Outcome{Results: []jvm.InjectResult{fail(jvm.ReasonDynamicLoadingDisabled)}}, nil, resultFailure, jmxv1alpha1.ReasonDynamicLoadingDisabled, 0},
		{"attach timeout retries", inject.Outcome{Results: []jvm.InjectResult{ok, fail(jvm.ReasonAttachTimeout)}}, nil, resultRetry, "AttachTimeout", 0},
		{"a transient failure wins over a permanent one", inject.Outcome{Results: []jvm.InjectResult{fail(jvm.ReasonPortInUse), fail(jvm.ReasonConnectFailed)}}, nil, resultRetry, "ConnectFailed", 0},
		{"a JVM that ended during the load wins over everything", inject.Outcome{Results: []jvm.InjectResult{fail(jvm.ReasonConnectFailed), ok, fail(jvm.ReasonProcessGone)}}, nil, resultFailure, jmxv1alpha1.ReasonJVMEnded, 1},
		{"the agent refused the config", inject.Outcome{Results: []jvm.InjectResult{fail(jvm.ReasonConfigInvalid)}}, nil, resultFailure, jmxv1alpha1.ReasonConfigInvalid, 0},
		{"copy-failed is permanent", inject.Outcome{Results: []jvm.InjectResult{fail(jvm.ReasonCopyFailed)}}, nil, resultFailure, jmxv1alpha1.ReasonCopyFailed, 0},
		{"an agent already present", inject.Outcome{Results: []jvm.InjectResult{fail(jvm.ReasonAgentAlreadyPresent)}}, nil, resultFailure, jmxv1alpha1.ReasonAgentAlreadyPresent, 0},
		{"root inaccessible", inject.Outcome{Results: []jvm.InjectResult{fail(jvm.ReasonRootInaccessible)}}, nil, resultFailure, jmxv1alpha1.ReasonRootInaccessible, 0},
		{"insufficient memory", inject.Outcome{Results: []jvm.InjectResult{fail(jvm.ReasonInsufficientMemory)}}, nil, resultFailure, jmxv1alpha1.ReasonInsufficientMemory, 0},
		{"a refused patch", inject.Outcome{Refused: inject.ReasonPatchRefused, Detail: "forbidden"}, nil, resultFailure, jmxv1alpha1.ReasonPatchRefused, 0},
		{"the budget is spent", inject.Outcome{Refused: inject.ReasonBudgetExhausted}, nil, resultFailure, jmxv1alpha1.ReasonEphemeralContainerBudgetExhausted, 0},
		{"a config too large", inject.Outcome{Refused: inject.ReasonConfigTooLarge}, nil, resultFailure, jmxv1alpha1.ReasonConfigTooLarge, 0},
		// A JVM injected before with another config that refused the new
		// one keeps its agent (and its old config).
		{"an injected JVM refused the new config", inject.Outcome{Results: []jvm.InjectResult{ok, fail(jvm.ReasonConfigRejected)}}, nil, resultSuccess, "", 2},
	}
	for _, c := range cases {
		got := classify(taskLoad, c.out, c.err)
		if got.class != c.class || got.reason != c.reason || len(got.jvms) != c.jvms {
			t.Errorf("%s: %+v, want %s %s with %d JVMs", c.name, got, c.class, c.reason, c.jvms)
		}
	}
	got := classify(taskLoad, inject.Outcome{Results: []jvm.InjectResult{ok, fail(jvm.ReasonConfigRejected)}}, nil)
	if got.rejected == "" || !strings.Contains(got.rejected, "m") {
		t.Errorf("a refused reconfiguration in an inject: rejected %q", got.rejected)
	}
	reconfigured := ok
	reconfigured.Note = "reconfigured. the httpServer section changed"
	if got := classify(taskLoad, inject.Outcome{Results: []jvm.InjectResult{reconfigured}}, nil); got.note != reconfigured.Note {
		t.Errorf("note %q, want the agent's", got.note)
	}
	got = classify(taskLoad, inject.Outcome{Results: []jvm.InjectResult{ok}}, nil)
	if j := got.jvms[0]; j.PID != 1 || j.Port != 9404 || j.Main != "app.jar" || j.StartedAt == nil || !j.StartedAt.Time.Equal(ok.StartedAt) {
		t.Errorf("JVM record %+v", j)
	}
}

func TestRecordRoundTripAndAnnotations(t *testing.T) {
	now := metav1.Now()
	rec := PodRecord{Exporter: "orders", Containers: map[string]ContainerRecord{
		"app":    {ContainerID: "containerd://a", Port: 9404, InjectedAt: &now, JVMs: []JVMRecord{{PID: 1, Port: 9405}, {PID: 2, Port: 9404}}},
		"side":   {ContainerID: "containerd://b", NoJVM: true},
		"broken": {ContainerID: "containerd://c", Failure: &Failure{Reason: "PortInUse"}},
	}}
	// The pod declares ports in its first container, and carries per-JVM
	// annotations of an earlier record with three JVMs.
	live := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		AnnotationJVMPrefix + "0": "app:9404", AnnotationJVMPrefix + "1": "app:9405", AnnotationJVMPrefix + "2": "side:9406",
		AnnotationJVMPrefix + "x": "not ours"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Ports: []corev1.ContainerPort{
			{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {ContainerPort: 8081, Protocol: corev1.ProtocolUDP}}}, {Name: "app"}}}}
	ann, _, err := rec.annotations(live)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{AnnotationPorts: "9404,9405", AnnotationPort: "9404", AnnotationScrape: "true", AnnotationPath: "/metrics",
		AnnotationExporter: "orders", AnnotationDiscoveryAnchor: "web;8080;TCP",
		AnnotationJVMPrefix + "0": "app:9404", AnnotationJVMPrefix + "1": "app:9405"}
	for k, v := range want {
		if ann[k] == nil || *ann[k] != v {
			t.Errorf("annotation %s = %v, want %q", k, ann[k], v)
		}
	}
	if v, ok := ann[AnnotationJVMPrefix+"2"]; !ok || v != nil {
		t.Errorf("the stale %s2 is %v, want an explicit null", AnnotationJVMPrefix, v)
	}
	if _, ok := ann[AnnotationJVMPrefix+"x"]; ok {
		t.Errorf("an annotation that only shares the prefix was touched")
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationAgents: *ann[AnnotationAgents]}}}
	back := readRecord(pod)
	if back.Exporter != "orders" || len(back.Containers) != 3 || back.Containers["broken"].Failure.Reason != "PortInUse" {
		t.Errorf("read back %+v", back)
	}
	if _, ok := back.current("app", "containerd://other"); ok {
		t.Error("a record of another container start applies")
	}
	if c, ok := back.current("app", "containerd://a"); !ok || len(c.JVMs) != 2 {
		t.Error("the current start's record does not apply")
	}
	// No JVM with the agent: the scrape annotations the operator wrote are
	// removed (null).
	ann, _, _ = PodRecord{Exporter: "x", Containers: map[string]ContainerRecord{"side": {NoJVM: true}},
		Written: promAnnotations}.annotations(live)
	for _, k := range []string{AnnotationScrape, AnnotationExporter, AnnotationDiscoveryAnchor, AnnotationJVMPrefix + "0"} {
		if v, ok := ann[k]; !ok || v != nil {
			t.Errorf("%s is %v, want an explicit null", k, v)
		}
	}
	// A first container without ports: discovery's one target for it has
	// no port labels.
	if got := discoveryAnchor(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}); got != "app;;" {
		t.Errorf("anchor %q, want %q", got, "app;;")
	}
	// An unreadable record is an empty one, not a crash.
	pod.Annotations[AnnotationAgents] = "{not json"
	if r := readRecord(pod); r.Exporter != "" || r.Containers == nil {
		t.Errorf("garbage record %+v", r)
	}
	if _, err := json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
}

// TestAPodKeepsItsOwnPrometheusAnnotations: a pod that carries its own
// prometheus.io annotations keeps them, the operator sets none and says so
// in the record (which survives restarts); annotations the operator wrote
// stay its own on later writes; records of earlier releases count the
// scrape annotations as the operator's; and with no JVM left only the
// operator's go.
func TestAPodKeepsItsOwnPrometheusAnnotations(t *testing.T) {
	injected := PodRecord{Exporter: "orders", Containers: map[string]ContainerRecord{
		"app": {ContainerID: "containerd://a", JVMs: []JVMRecord{{PID: 1, Port: 9404}}}}}
	own := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		AnnotationScrape: "true", AnnotationPort: "8080", "prometheus.io/scheme": "https"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
	ann, rec, err := injected.annotations(own)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{AnnotationScrape, AnnotationPort, AnnotationPath, "prometheus.io/scheme"} {
		if v, ok := ann[k]; ok {
			t.Errorf("the pod's own %s is touched (%v)", k, v)
		}
	}
	if ann[AnnotationPorts] == nil || *ann[AnnotationPorts] != "9404" || ann[AnnotationExporter] == nil {
		t.Errorf("the operator's own annotations are missing: %v", ann)
	}
	if want := []string{AnnotationPort, "prometheus.io/scheme", AnnotationScrape}; len(rec.Written) != 0 || strings.Join(rec.Kept, ",") != strings.Join(want, ",") {
		t.Errorf("written %v kept %v, want none written and %v kept", rec.Written, rec.Kept, want)
	}
	if back := readRecord(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationAgents: *ann[AnnotationAgents]}}}); len(back.Kept) != 3 {
		t.Errorf("the record does not keep Kept: %+v", back)
	}
	if note := keptNote("p", rec); !strings.Contains(note, AnnotationPort) || !strings.Contains(note, "PodMonitor") {
		t.Errorf("note %q", note)
	}

	// A pod without its own: the operator writes and owns them, and keeps
	// owning them on the next write.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
	ann, rec, _ = injected.annotations(bare)
	if ann[AnnotationScrape] == nil || ann[AnnotationPort] == nil || *ann[AnnotationPort] != "9404" || len(rec.Written) != 3 {
		t.Fatalf("annotations %v, written %v", ann, rec.Written)
	}
	for k, v := range ann {
		if v != nil {
			bare.Annotations[k] = *v
		}
	}
	if ann, rec, _ = readRecord(bare).annotations(bare); ann[AnnotationPort] == nil || len(rec.Written) != 3 || len(rec.Kept) != 0 {
		t.Errorf("second write: annotations %v, written %v kept %v", ann, rec.Written, rec.Kept)
	}

	// A record of an earlier release (no written/kept) next to the scrape
	// annotations it wrote: they are the operator's.
	legacy := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		AnnotationScrape: "true", AnnotationPort: "9404", AnnotationPath: "/metrics", AnnotationExporter: "orders"}}}
	if got := (PodRecord{Exporter: "orders"}).written(legacy); len(got) != 3 {
		t.Errorf("legacy record: written %v, want the three scrape annotations", got)
	}
	// With no JVM left, the pod's own annotations stay.
	none := PodRecord{Exporter: "orders", Containers: map[string]ContainerRecord{"app": {NoJVM: true}}, Kept: rec.Kept}
	ann, _, _ = none.annotations(own)
	for _, k := range []string{AnnotationScrape, AnnotationPort, "prometheus.io/scheme"} {
		if _, ok := ann[k]; ok {
			t.Errorf("no JVM: the pod's own %s is touched", k)
		}
	}
	if v, ok := ann[AnnotationExporter]; !ok || v != nil {
		t.Errorf("no JVM: %s is %v, want an explicit null", AnnotationExporter, v)
	}
}

func TestOwnerOfIsTheOldestSelectingExporter(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "a", "tier": "web"}}}
	at := func(name string, sec int64, labels map[string]string) jmxv1alpha1.PrometheusJmxExporter {
		return jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Unix(sec, 0)},
			Spec: jmxv1alpha1.PrometheusJmxExporterSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	}
	exs := []jmxv1alpha1.PrometheusJmxExporter{
		at("newer", 200, map[string]string{"app": "a"}),
		at("older", 100, map[string]string{"tier": "web"}),
		at("oldest-other", 50, map[string]string{"app": "b"}),
		at("empty", 10, map[string]string{}),
	}
	refs := func() []*selectorRef {
		var out []*selectorRef
		for i := range exs {
			out = append(out, refOf(&exs[i]))
		}
		return out
	}
	if o := ownerOf(pod, refs()); o == nil || o.name != "older" {
		t.Fatalf("owner %v", o)
	}
	exs = append(exs, at("also-older", 100, map[string]string{"app": "a"}))
	if o := ownerOf(pod, refs()); o.name != "also-older" {
		t.Fatalf("tie: owner %s, want the first by name", o.name)
	}
	now := metav1.Now()
	exs[len(exs)-1].DeletionTimestamp = &now
	if o := ownerOf(pod, refs()); o.name != "older" {
		t.Fatalf("an exporter being deleted owns pods: owner %s", o.name)
	}
}

func TestBasePortSkipsOtherContainersPorts(t *testing.T) {
	rec := PodRecord{Exporter: "x", Containers: map[string]ContainerRecord{
		"a": {ContainerID: "id-a", JVMs: []JVMRecord{{Port: 9404}, {Port: 9405}}},
		"b": {ContainerID: "old-b", JVMs: []JVMRecord{{Port: 9406}}},
	}}
	ann, _, _ := rec.annotations(&corev1.Pod{})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationAgents: *ann[AnnotationAgents]}}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "a", ContainerID: "id-a"}, {Name: "b", ContainerID: "id-b"}, {Name: "c", ContainerID: "id-c"}}
	inUse := portsInUse(pod)
	if p := basePort(inUse, "c", 9404); p != 9406 {
		t.Errorf("c: %d, want 9406 (b's old start no longer counts)", p)
	}
	if p := basePort(inUse, "a", 9404); p != 9404 {
		t.Errorf("a: %d, want its own 9404", p)
	}
	// A port taken earlier in the same job counts too.
	inUse["c"] = []int32{9406}
	if p := basePort(inUse, "d", 9404); p != 9407 {
		t.Errorf("d: %d, want 9407", p)
	}
}

func TestTrimPodKeepsWhatTheOperatorReads(t *testing.T) {
	uid := int64(1000)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n", UID: "u", Labels: map[string]string{"a": "b"},
			Annotations: map[string]string{"k": "v"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", UID: "rs-uid", Controller: ptrTo(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "big", Env: []corev1.EnvVar{{Name: "X", Value: "Y"}},
			SecurityContext: &corev1.SecurityContext{RunAsUser: &uid}}}, Volumes: []corev1.Volume{{Name: "v"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.5",
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: "cid", Image: "big",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
	obj, err := trimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*corev1.Pod)
	if got.Name != "p" || got.UID != "u" || got.Labels["a"] != "b" || got.Annotations["k"] != "v" || got.Status.PodIP != "10.0.0.5" ||
		got.Status.ContainerStatuses[0].ContainerID != "cid" || *got.Spec.Containers[0].SecurityContext.RunAsUser != 1000 ||
		metav1.GetControllerOf(got) == nil || metav1.GetControllerOf(got).UID != "rs-uid" {
		t.Errorf("trimmed away something read: %+v", got)
	}
	if len(got.ManagedFields) != 0 || got.Spec.Containers[0].Image != "" || len(got.Spec.Containers[0].Env) != 0 || len(got.Spec.Volumes) != 0 {
		t.Errorf("kept what is not read: %+v", got)
	}
}

func TestCamel(t *testing.T) {
	for in, want := range map[string]string{"port-not-permitted": "PortNotPermitted", "internal": "Internal", "": "Unknown"} {
		if got := camel(in); got != want {
			t.Errorf("camel(%q) = %q", in, got)
		}
	}
}

func TestPodMonitorHasAnEndpointPerJVMOfTheFullestPod(t *testing.T) {
	ex := &jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Name: "a.b", Namespace: "n"},
		Spec: jmxv1alpha1.PrometheusJmxExporterSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}}}
	p := &plan{endpoints: []jmxv1alpha1.MetricsEndpoint{{Pod: "p1"}, {Pod: "p2"}, {Pod: "p2"}, {Pod: "p2"}, {Pod: "p3"}}}
	if n := maxJVMsPerPod(p); n != 3 {
		t.Fatalf("maxJVMsPerPod %d, want 3", n)
	}
	for _, jvms := range []int{0, 1, 3} {
		spec, err := podMonitorSpec(ex, jvms)
		if err != nil {
			t.Fatal(err)
		}
		eps := spec["podMetricsEndpoints"].([]any)
		if want := max(jvms, 1); len(eps) != want {
			t.Errorf("%d JVMs: %d endpoints, want %d", jvms, len(eps), want)
		}
		for i, ep := range eps {
			rels := ep.(map[string]any)["relabelings"].([]any)
			first := rels[0].(map[string]any)
			// The exporter's name is matched literally: the dot is no
			// wildcard.
			if first["regex"] != `a\.b` {
				t.Errorf("endpoint %d keeps exporter %v", i, first["regex"])
			}
			jvm := rels[1].(map[string]any)["sourceLabels"].([]any)[0]
			if want := "__meta_kubernetes_pod_annotation_jmx_handlerkit_dev_jvm_" + fmt.Sprint(i); jvm != want {
				t.Errorf("endpoint %d scrapes %v, want %s", i, jvm, want)
			}
		}
	}
}

func TestStoppedOnRequestIsSIGTERMOnly(t *testing.T) {
	for _, c := range []struct {
		term corev1.ContainerStateTerminated
		want bool
	}{
		{corev1.ContainerStateTerminated{ExitCode: 143, Reason: "Error"}, true},
		{corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "Prometheus JMX Exporter exiting"}, false},
		{corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}, false},
		{corev1.ContainerStateTerminated{ExitCode: 134, Reason: "Error"}, false},
		{corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}, false},
	} {
		if got := stoppedOnRequest(&c.term); got != c.want {
			t.Errorf("%+v: %v, want %v", c.term, got, c.want)
		}
	}
}

// TestARefusalOfAttachUnderBothIsAttachRefused: under mode Both, the two
// reasons of a JVM that refuses a live attach become AttachRefused, keeping
// the JVM's own reason and saying when the pod gets the agent; every other
// outcome stays as it was.
func TestARefusalOfAttachUnderBothIsAttachRefused(t *testing.T) {
	for _, reason := range []string{jmxv1alpha1.ReasonAttachDisabled, jmxv1alpha1.ReasonDynamicLoadingDisabled} {
		for _, restart := range []bool{false, true} {
			got := refusedUnderBoth(classified{class: resultFailure, reason: reason, failure: &Failure{Reason: reason, Message: "JVM 1 (app.Main): m"}}, restart)
			if got.reason != jmxv1alpha1.ReasonAttachRefused || got.failure.Reason != jmxv1alpha1.ReasonAttachRefused || got.class != resultFailure {
				t.Errorf("%s: %+v", reason, got)
			}
			for _, w := range []string{reason, "JVM 1 (app.Main): m", "next created", "rollout", "container restart"} {
				if !strings.Contains(got.failure.Message, w) {
					t.Errorf("%s: message %q lacks %q", reason, got.failure.Message, w)
				}
			}
			if strings.Contains(got.failure.Message, "evicts") != restart {
				t.Errorf("%s, restartOnRefusal %v: message %q", reason, restart, got.failure.Message)
			}
		}
	}
	for _, c := range []classified{
		{class: resultSuccess},
		{class: resultFailure, reason: jmxv1alpha1.ReasonPortInUse, failure: &Failure{Reason: jmxv1alpha1.ReasonPortInUse}},
		{class: resultRetry, reason: "AttachTimeout"},
	} {
		if got := refusedUnderBoth(c, true); got.reason != c.reason || got.failure != c.failure {
			t.Errorf("%+v became %+v", c, got)
		}
	}
}

// TestClassifyReload pins how the one classifier reads a reload's outcome
// (what classifyReload did before it): a refusal of the config or of the
// request is the rejection to record, any other failure a transient error
// with its first cause, a JVM that never got the agent is left alone, and
// only the notes of agents that reloaded count.
func TestClassifyReload(t *testing.T) {
	ok := jvm.InjectResult{NSPID: 1, MainClass: "a", Status: jvm.OutcomeOK, Note: "reloaded"}
	fail := func(r jvm.Reason) jvm.InjectResult {
		return jvm.InjectResult{NSPID: 3, MainClass: "c", Status: jvm.OutcomeError, Reason: r, Message: "m", Note: "ignored"}
	}
	cases := []struct {
		name                  string
		out                   inject.Outcome
		err                   error
		class, reason, detail string
	}{
		{"a failed call", inject.Outcome{}, errors.New("timeout"), resultRetry, "", "timeout"},
		{"no result", inject.Outcome{Detail: "d"}, nil, resultRetry, "", "no result: d"},
		{"no JVM is no result", inject.Outcome{NoJVM: true}, nil, resultRetry, "", "no result: "},
		{"the budget is spent", inject.Outcome{Refused: inject.ReasonBudgetExhausted, Detail: "spent"}, nil, resultFailure,
			jmxv1alpha1.ReasonEphemeralContainerBudgetExhausted, "spent"},
		{"refused wins over results", inject.Outcome{Refused: inject.ReasonPatchRefused, Detail: "no", Results: []jvm.InjectResult{ok}}, nil,
			resultFailure, jmxv1alpha1.ReasonPatchRefused, "no"},
		{"reloaded, and one never injected", inject.Outcome{Results: []jvm.InjectResult{ok, fail(jvm.ReasonNotInjected)}}, nil, resultSuccess, "", ""},
		{"a config rejected wins over a transient failure", inject.Outcome{Results: []jvm.InjectResult{fail(jvm.ReasonConnectFailed), fail(jvm.ReasonConfigRejected)}},
			nil, resultFailure, jmxv1alpha1.ReasonConfigRejected, "JVM 3 (c): m"},
		{"a permanent load failure is transient in a reload", inject.Outcome{Results: []jvm.InjectResult{ok, fail(jvm.ReasonPortInUse), fail(jvm.ReasonProcessGone)}},
			nil, resultRetry, "", "JVM 3 (c): port-in-use: m"},
	}
	for _, c := range cases {
		got := classify(taskReload, c.out, c.err)
		detail := got.message
		if got.class == resultRetry {
			if got.err == nil {
				t.Errorf("%s: a retry without its error", c.name)
				continue
			}
			detail = got.err.Error()
		}
		if got.class != c.class || c.reason != "" && got.reason != c.reason || detail != c.detail {
			t.Errorf("%s: %s %s %q, want %s %s %q", c.name, got.class, got.reason, detail, c.class, c.reason, c.detail)
		}
		if got.class == resultSuccess && got.note != "reloaded" {
			t.Errorf("%s: note %q, want only the reloaded agent's", c.name, got.note)
		}
	}
}
