package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
)

// TestABurstOfPodCreationsGetsTheAgentOnTheNode (issue 41): the operator as
// deployed, two replicas on the real node (one leads, one does not) behind
// the webhook's Service; 200 pods of an AtStart exporter whose change is
// proven are created in 10 s, concurrently, and every one is admitted with
// the agent (its start-time record and the agent in JAVA_TOOL_OPTIONS).
// Before issue 41 a replica that did not lead held a lock around an API list
// for each admission, so a burst queued past the API server's 5 s timeout
// and pods were admitted without the agent. The pods ask for a node that
// does not exist, so none runs: what is tested is their admission.
func TestABurstOfPodCreationsGetsTheAgentOnTheNode(t *testing.T) {
	t.Parallel()
	op := deployAtStartOperator(t, "e2e-burst")
	ns := op.ns
	scaleOperator(t, ns, 2)
	labels := map[string]string{"app": "burst"}
	createExporter(t, ns, exporter("burst", labels, withMode(jmxv1alpha1.InjectionModeAtStart)))
	markProven(t, ns, "burst", jmxv1alpha1.DefaultExporterConfig)
	waitWebhookSeesProven(t, ns, labels, "burst")

	const pods, over = 200, 10 * time.Second
	var wg sync.WaitGroup
	var mu sync.Mutex
	var missing, failed []string
	start := time.Now()
	for i := range pods {
		time.Sleep(time.Until(start.Add(over * time.Duration(i) / pods)))
		wg.Go(func() {
			p := jvmPod(fmt.Sprintf("burst-%03d", i), labels, testimages.JVMAppRef)
			p.Spec.NodeSelector = map[string]string{"handlerkit.dev/e2e-burst": "no-such-node"}
			got, err := kube.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", p.Name, err))
				return
			}
			if rec, ok, err := atstart.ParseRecord(got); !ok || err != nil || rec.Exporter != "burst" || !loadsTheAgent(got) {
				missing = append(missing, fmt.Sprintf("%s (notes %q)", got.Name, got.Annotations[atstart.AnnotationNotes]))
			}
		})
	}
	wg.Wait()
	t.Logf("%d pods created in %s", pods, time.Since(start).Round(time.Millisecond))
	if len(failed) > 0 {
		t.Errorf("%d creations failed: %s", len(failed), strings.Join(failed[:min(5, len(failed))], "; "))
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d pods admitted without the agent: %s", len(missing), pods, strings.Join(missing[:min(5, len(missing))], "; "))
	}
}

// waitWebhookSeesProven waits until the webhook injects pods of the
// exporter as proven (no canary) on every replica: the replicas answer
// behind the Service at random, and one whose cache has not yet seen
// status.proven would give the first pod of a burst the change as a canary
// and hold every other back (ChangeBeingTried), as it should. Ten answers
// in a row without a canary make a replica that lags unlikely to remain
// (at most 1 in 1,024 with two replicas).
func waitWebhookSeesProven(t *testing.T, ns string, labels map[string]string, exporterName string) {
	t.Helper()
	probe := jvmPod("webhook-probe", labels, testimages.JVMAppRef)
	inARow := 0
	waitFor(t, 2*time.Minute, "ten answers in a row injecting "+exporterName+"'s proven change", func() (bool, string) {
		p, err := kube.CoreV1().Pods(ns).Create(t.Context(), probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			inARow = 0
			return false, err.Error()
		}
		rec, ok, err := atstart.ParseRecord(p)
		if err != nil || !ok || rec.Exporter != exporterName || rec.Canary {
			inARow = 0
			return false, fmt.Sprintf("record %+v (%v, %v), notes %q", rec, ok, err, p.Annotations[atstart.AnnotationNotes])
		}
		inARow++
		return inARow >= 10, fmt.Sprintf("%d in a row", inARow)
	})
}

// loadsTheAgent says whether the pod's container app loads the agent
// through its JAVA_TOOL_OPTIONS.
func loadsTheAgent(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == "JAVA_TOOL_OPTIONS" && strings.Contains(e.Value, "-javaagent:") {
				return true
			}
		}
	}
	return false
}
