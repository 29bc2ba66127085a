package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
)

// TestTheStatusNamesTheCurrentStartAfterEachRestart (issue 41): a JVM
// container whose PID 1 is killed is restarted by the kubelet and injected
// again; the exporter's status.metricsEndpoints must name the new container
// start (ID, pid, injectedAt) within 10 s of its record on the pod, three
// restarts running, and no status read once a start was recorded (a second
// later, the time for the watch and one write) may say Ready=True while it
// names a container start that no longer runs. Before issue 41, a status
// whose counts did not change was never written: the old container ID, pid
// and injectedAt stayed for minutes under Ready=True.
func TestTheStatusNamesTheCurrentStartAfterEachRestart(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-restart-status", nil)
	deployOperator(t, ns)
	labels := map[string]string{"app": "restarts"}
	createPod(t, ns, jvmPod("jvm", labels, testimages.JVMAppRef))
	waitRunning(t, ns, "jvm")
	createExporter(t, ns, exporter("restarts", labels))
	ep := checkInjected(t, ns, "restarts", "jvm", jmxv1alpha1.DefaultPort)

	// Every status read, with when it was read.
	type seen struct {
		at    time.Time
		ready bool
		ids   []string
	}
	var mu sync.Mutex
	var reads []seen
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			ex, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Get(t.Context(), "restarts", metav1.GetOptions{})
			if err != nil {
				continue
			}
			s := seen{at: time.Now()}
			s.ready = findCond(ex.Status.Conditions, jmxv1alpha1.ConditionReady).Status == metav1.ConditionTrue
			for _, e := range ex.Status.MetricsEndpoints {
				s.ids = append(s.ids, e.ContainerID)
			}
			mu.Lock()
			reads = append(reads, s)
			mu.Unlock()
		}
	}()
	defer func() {
		select {
		case <-done:
		default:
			close(done)
		}
		<-stopped
	}()

	prev := ep.ContainerID
	for i := 1; i <= 3; i++ {
		restartContainer(t, ns, "jvm")
		// The new start's record on the pod.
		var current string
		var recordedAt time.Time
		waitFor(t, 2*time.Minute, fmt.Sprintf("restart %d recorded on the pod", i), func() (bool, string) {
			rec, pod := injectedRecord(t, ns, "jvm")
			cs := pod.Status.ContainerStatuses[0]
			c, ok := rec.Containers[cs.Name]
			if !ok || c.ContainerID != cs.ContainerID || c.ContainerID == prev || len(c.JVMs) == 0 {
				return false, fmt.Sprintf("record %+v, running %s", rec.Containers, cs.ContainerID)
			}
			current, recordedAt = c.ContainerID, time.Now()
			return true, ""
		})
		var listed time.Time
		waitFor(t, 10*time.Second, fmt.Sprintf("restart %d (%s) listed in the status within 10 s of its record", i, current), func() (bool, string) {
			ex := getExporter(t, ns, "restarts")
			for _, e := range ex.Status.MetricsEndpoints {
				if e.Pod == "jvm" && e.ContainerID == current && e.PID != 0 && !e.InjectedAt.IsZero() {
					listed = time.Now()
					return true, ""
				}
			}
			return false, fmt.Sprintf("%+v", ex.Status.MetricsEndpoints)
		})
		t.Logf("restart %d: %s listed %s after its record", i, current, listed.Sub(recordedAt).Round(time.Millisecond))
		// No read from a second after the record on says Ready with the
		// container start that ended.
		mu.Lock()
		for _, s := range reads {
			if !s.at.After(recordedAt.Add(time.Second)) {
				continue
			}
			for _, id := range s.ids {
				if s.ready && id != current {
					t.Errorf("restart %d: the status read %s after the record says Ready=True and names %s, not the running %s",
						i, s.at.Sub(recordedAt).Round(time.Millisecond), id, current)
				}
			}
		}
		reads = nil
		mu.Unlock()
		prev = current
	}
}
