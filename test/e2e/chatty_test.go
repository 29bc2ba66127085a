package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/inject"
)

// TestExecReadsABoundedOutputOfAShellThatPrintsWithoutEnd: a tenant's image
// whose /bin/sh prints without end (ChattyShellRef), targeted by an exporter
// with the Exec strategy, does not take the shared operator down: the
// operator reads at most inject.MaxExecOutput bytes of each stream, stops the
// exec, and the pod gets the named reason ExecOutputTooLarge in its record,
// the exporter's Degraded condition and an Event. Meanwhile the operator's
// resident memory (its own process_resident_memory_bytes, sampled) stays
// under its container's memory limit and it is never restarted.
func TestExecReadsABoundedOutputOfAShellThatPrintsWithoutEnd(t *testing.T) {
	t.Parallel()
	needImage(t, testimages.ChattyShellRef, testimages.BuildChattyShell)
	ns := newNamespace(t, "e2e-chatty", nil)
	dep := deployOperator(t, ns, withExec())
	limit := dep.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().Value()
	if limit <= 0 {
		t.Fatalf("the operator's Deployment sets no memory limit: the test proves nothing")
	}

	var mu sync.Mutex
	var peak float64
	samples := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if v, ok := operatorRSS(ns); ok {
				mu.Lock()
				peak = max(peak, v)
				samples++
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-done }()

	labels := map[string]string{"app": "chatty"}
	createPod(t, ns, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "chatty", Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers:                    []corev1.Container{{Name: "app", Image: testimages.ChattyShellRef, ImagePullPolicy: corev1.PullNever}},
		},
	})
	waitRunning(t, ns, "chatty")
	createExporter(t, ns, exporter("chatty", labels, withStrategy(jmxv1alpha1.InjectionExec, 9500)))

	// The wait ends early when the operator went down meanwhile.
	waitFor(t, 4*time.Minute, "chatty Degraded=True InjectionFailed naming "+jmxv1alpha1.ReasonExecOutputTooLarge, func() (bool, string) {
		if down := operatorRestarts(t, ns); down != "" {
			t.Fatalf("the operator went down: %s", down)
		}
		c := findCond(getExporter(t, ns, "chatty").Status.Conditions, jmxv1alpha1.ConditionDegraded)
		return c.Status == metav1.ConditionTrue && c.Reason == jmxv1alpha1.ReasonInjectionFailed &&
			strings.Contains(c.Message, jmxv1alpha1.ReasonExecOutputTooLarge), fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
	})
	rec, _ := injectedRecord(t, ns, "chatty")
	c := rec.Containers["app"]
	if c.Failure == nil || c.Failure.Reason != jmxv1alpha1.ReasonExecOutputTooLarge {
		t.Fatalf("record %+v, want the failure %s", c, jmxv1alpha1.ReasonExecOutputTooLarge)
	}
	for _, w := range []string{fmt.Sprint(inject.MaxExecOutput), "EphemeralContainer"} {
		if !strings.Contains(c.Failure.Message, w) {
			t.Errorf("failure message %q lacks %q", c.Failure.Message, w)
		}
	}
	if strings.ContainsAny(c.Failure.Message, "\n\r") {
		t.Errorf("failure message %q is not one line", c.Failure.Message)
	}
	waitFor(t, 30*time.Second, "an ExecOutputTooLarge Event on the pod", func() (bool, string) {
		return hasEvent(events(t, ns, "Pod", "chatty"), jmxv1alpha1.ReasonExecOutputTooLarge), "none"
	})

	mu.Lock()
	got, n := peak, samples
	mu.Unlock()
	if n == 0 {
		t.Fatal("the operator's memory was never read: the test proves nothing")
	}
	if got >= float64(limit) {
		t.Errorf("the operator's resident memory reached %.0f MB, its limit is %d MB", got/1e6, limit/1e6)
	}
	t.Logf("the operator's peak resident memory: %.0f MB of %d MB (%d samples)", got/1e6, limit/1e6, n)
	if down := operatorRestarts(t, ns); down != "" {
		t.Errorf("the operator went down: %s", down)
	}
}

// operatorRestarts says how the operator's containers in ns restarted ("":
// never).
func operatorRestarts(t *testing.T, ns string) string {
	t.Helper()
	pods, err := kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + operatorName})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount == 0 {
				continue
			}
			why := "unknown"
			if term := cs.LastTerminationState.Terminated; term != nil {
				why = fmt.Sprintf("%s, exit code %d", term.Reason, term.ExitCode)
			}
			out = append(out, fmt.Sprintf("pod %s container %s restarted %d times (last: %s)", p.Name, cs.Name, cs.RestartCount, why))
		}
	}
	return strings.Join(out, "; ")
}
