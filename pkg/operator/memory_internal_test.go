package operator

import (
	"fmt"
	"runtime"
	"testing"
	"weak"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if jobs[0].pod.Name != "p3" || jobs[1].pod.Name != "p700" {
		t.Errorf("the jobs' pods are not theirs: %s %s", jobs[0].pod.Name, jobs[1].pod.Name)
	}
	runtime.KeepAlive(jobs)
}

// TestAQueuedJobKeepsOnlyWhatItReadsOfItsPod: a queued job's pod has the
// pod's identity and its containers' names and security contexts (whom
// jmx-attach runs as), and none of its labels, annotations or statuses,
// which the job reads from the cache when it starts.
func TestAQueuedJobKeepsOnlyWhatItReadsOfItsPod(t *testing.T) {
	uid, gid := int64(1000), int64(2000)
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u-1", ResourceVersion: "7",
			Labels: map[string]string{"app": "orders"}, Annotations: map[string]string{AnnotationAgents: `{"exporter":"x"}`}},
		Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &gid},
			Containers: []corev1.Container{{Name: "app", Image: "jvm", SecurityContext: &corev1.SecurityContext{RunAsUser: &gid}}}},
		Status: corev1.PodStatus{PodIP: "10.0.0.5", ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: "containerd://1"}}},
	}
	j := &job{pod: pod}
	ownPods([]*job{j})
	got := j.pod
	if got == pod || got.Name != "a" || got.Namespace != "ns" || got.UID != "u-1" || got.ResourceVersion != "7" || got.Kind != "Pod" {
		t.Errorf("identity: %+v", got.ObjectMeta)
	}
	if sc := got.Spec.SecurityContext; sc == nil || *sc.RunAsUser != uid || *sc.RunAsGroup != gid {
		t.Errorf("pod security context: %+v", sc)
	}
	if len(got.Spec.Containers) != 1 || got.Spec.Containers[0].Name != "app" || *got.Spec.Containers[0].SecurityContext.RunAsUser != gid {
		t.Errorf("containers: %+v", got.Spec.Containers)
	}
	if got.Labels != nil || got.Annotations != nil || got.Status.PodIP != "" || got.Status.ContainerStatuses != nil || got.Spec.Containers[0].Image != "" {
		t.Errorf("the job keeps more than it reads: %+v", got)
	}
}
