package clustertest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// agentPort is where the test agent serves /metrics inside a JVM pod.
const agentPort = 9404

// jvmPod runs image's sample application with the test agent loaded at
// start from a read-only host directory, so that its MBeans can be read
// over HTTP at the pod IP.
func jvmPod(ns, name, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](2),
			Containers: []corev1.Container{{
				Name: "app", Image: image, ImagePullPolicy: corev1.PullNever,
				// On the command line rather than in JAVA_TOOL_OPTIONS, which
				// every exec'd java would pick up too.
				Command: []string{testimages.JavaHome + "/bin/java",
					fmt.Sprintf("-javaagent:/agent/agent.jar=%d:/agent/config.yaml", agentPort),
					"-cp", testimages.AppDir + "/" + jvmtest.SampleJarName, jvmtest.SampleMainClass},
				VolumeMounts: []corev1.VolumeMount{{Name: "agent", MountPath: "/agent", ReadOnly: true}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
						Path: "/metrics", Port: intstr.FromInt32(agentPort)}},
					PeriodSeconds: 1,
				},
			}},
			Volumes: []corev1.Volume{{Name: "agent", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: agentDir, Type: ptr.To(corev1.HostPathDirectory)}}}},
		},
	}
}

// counter reads the sample application's request counter MBean through
// the agent's /metrics.
func counter(t *testing.T, ip string) float64 {
	t.Helper()
	body := httpGet(t, fmt.Sprintf("http://%s/metrics", net.JoinHostPort(ip, strconv.Itoa(agentPort))))
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "handlerkit_sample_counter_count "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("bad counter line %q", line)
			}
			return f
		}
	}
	t.Fatalf("no handlerkit_sample_counter_count in /metrics:\n%s", body)
	return 0
}

// assertCounterGrows reads the counter MBean until it has grown past its
// first reading: the app increments it every 100 ms, so a live JVM passes
// within a few polls; 30 s is the deadline for one that does not.
func assertCounterGrows(t *testing.T, ip string) {
	t.Helper()
	first := counter(t, ip)
	last := first
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, false,
		func(context.Context) (bool, error) {
			last = counter(t, ip)
			return last > first, nil
		})
	if err != nil {
		t.Fatalf("counter MBean did not grow: %v, still %v after 30s", first, last)
	}
}

func TestJVMImageRunsAJVMWhoseMBeansCanBeRead(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	pod := runPod(t, jvmPod(ns, "jvm", testimages.JVMAppRef))
	assertCounterGrows(t, pod.Status.PodIP)
	logs, err := env.Clientset().CoreV1().Pods(ns).GetLogs("jvm", &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), jvmtest.SampleReadyLine) {
		t.Fatalf("JVM log lacks the ready line:\n%s", logs)
	}
}

func TestShelllessImageRunsTheJVMButHasNoShell(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	pod := runPod(t, jvmPod(ns, "slim", testimages.ShelllessJVMRef))
	assertCounterGrows(t, pod.Status.PodIP)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Exec itself works: the JRE's own launcher runs.
	if _, stderr, err := exec(ctx, ns, "slim", "app", testimages.JavaHome+"/bin/java", "-version"); err != nil ||
		!strings.Contains(stderr, "17.") {
		t.Fatalf("java -version in the shell-less image: err %v, stderr %q", err, stderr)
	}
	for _, cmd := range [][]string{{"sh", "-c", "true"}, {"/bin/sh", "-c", "true"}, {"bash"}, {"tar", "--version"},
		{"ls", "/"}, {"jps"}, {testimages.JavaHome + "/bin/jcmd"}} {
		stdout, stderr, err := exec(ctx, ns, "slim", "app", cmd...)
		if err == nil {
			t.Errorf("exec %q succeeded in the shell-less image (stdout %q stderr %q)", cmd, stdout, stderr)
		}
	}
}
