package operator

import (
	"fmt"
	"runtime"
	"testing"
	"weak"

	corev1 "k8s.io/api/core/v1"
)

// TestQueuedJobsKeepOnlyTheirOwnPods: a job planned from a list of pods
// keeps its pod, not the list, so that the jobs queued in the pool keep no
// look's pods alive (issue 28: 9.2 GiB at 7,500 pods).
func TestQueuedJobsKeepOnlyTheirOwnPods(t *testing.T) {
	pods := make([]corev1.Pod, 1000)
	for i := range pods {
		pods[i].Name, pods[i].Labels = fmt.Sprintf("p%d", i), map[string]string{"app": "orders"}
	}
	jobs := []*job{{pod: &pods[3]}, {pod: &pods[700]}}
	list := weak.Make(&pods[0])
	ownPods(jobs)
	pods = nil
	runtime.GC()
	runtime.GC()
	if list.Value() != nil {
		t.Error("the queued jobs keep the whole list of pods alive")
	}
	if jobs[0].pod.Name != "p3" || jobs[1].pod.Name != "p700" || jobs[1].pod.Labels["app"] != "orders" {
		t.Errorf("the jobs' pods are not theirs: %s %s %v", jobs[0].pod.Name, jobs[1].pod.Name, jobs[1].pod.Labels)
	}
	runtime.KeepAlive(jobs)
}
