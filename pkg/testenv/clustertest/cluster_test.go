package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	"github.com/handlerkit/handlerkit/pkg/images/testimages"
)

// namespace creates a namespace for one test and waits for its default
// ServiceAccount, which the ServiceAccount admission plugin requires of pods.
func namespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ns, err := env.CreateNamespace(ctx, strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))[:min(len(t.Name()), 40)])
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := env.Clientset().CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("default ServiceAccount of %s never appeared: %v", ns, err)
	}
	return ns
}

func echoContainer() corev1.Container {
	return corev1.Container{
		Name:            "server",
		Image:           testimages.EchoRef,
		ImagePullPolicy: corev1.PullNever,
		Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
		Ports: []corev1.ContainerPort{{ContainerPort: testimages.EchoPort}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromInt32(testimages.EchoPort)}},
			PeriodSeconds: 1,
		},
	}
}

// runPod creates pod and waits until it is Ready.
func runPod(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pods := env.Clientset().CoreV1().Pods(pod.Namespace)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s not ready: %v; status: %+v", pod.Name, err, last.Status)
	}
	return last
}

// exec runs command in a container through the apiserver, as kubectl exec.
func exec(ctx context.Context, ns, pod, container string, command ...string) (string, string, error) {
	req := env.Clientset().CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: container, Command: command, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec)
	executor, err := remotecommand.NewWebSocketExecutor(env.Config(), "GET", req.URL().String())
	if err != nil {
		return "", "", err
	}
	var stdout, stderr bytes.Buffer
	err = executor.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return stdout.String(), stderr.String(), err
}

func TestDeploymentOfThreeReplicasBecomesAvailable(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	ctx := context.Background()
	labels := map[string]string{"app": "echo"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{echoContainer()}},
			},
		},
	}
	deps := env.Clientset().AppsV1().Deployments(ns)
	if _, err := deps.Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *appsv1.Deployment
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := deps.Get(ctx, "echo", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = d
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue && d.Status.AvailableReplicas == 3 {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("deployment not available with 3 replicas: %v; status %+v", err, last.Status)
	}
	pods, err := env.Clientset().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
	if err != nil {
		t.Fatal(err)
	}
	ips := map[string]bool{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			ips[p.Status.PodIP] = true
		}
	}
	if len(ips) != 3 {
		t.Fatalf("want 3 running pods with distinct IPs, got %v", ips)
	}
}

func TestExecThroughAPIServerReturnsOutput(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	runPod(t, toolboxPod(ns, "toolbox"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdout, stderr, err := exec(ctx, ns, "toolbox", "toolbox", "sh", "-c", "echo out-$((40+2)); echo err-7 >&2")
	if err != nil {
		t.Fatalf("exec: %v (stderr %q)", err, stderr)
	}
	if stdout != "out-42\n" || stderr != "err-7\n" {
		t.Fatalf("exec returned stdout %q stderr %q, want %q and %q", stdout, stderr, "out-42\n", "err-7\n")
	}
}

// toolboxPod runs the Debian-based JVM application image as a shell that
// sleeps, for exec and for ephemeral containers.
func toolboxPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "toolbox", Image: testimages.JVMAppRef, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "infinity"},
			}},
		},
	}
}

func TestEphemeralContainerSeesTargetProcessesAndRoot(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "target", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{echoContainer()}},
	}
	runPod(t, pod)
	// The debug container finds the echo server among the processes it
	// shares with the target, then reads the server's own root filesystem
	// through /proc/<pid>/root: the way the operator reaches a JVM.
	script := `for d in /proc/[0-9]*; do
  if [ "$(tr '\0' ' ' < $d/cmdline 2>/dev/null)" = "/echoserver -listen :8080 " ]; then
    echo "pid=${d#/proc/}"; ls $d/root/; exit 0
  fi
done; echo "no echoserver"; ps -ef 2>/dev/null; exit 1`
	p, err := env.Clientset().CoreV1().Pods(ns).Get(ctx, "target", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
		TargetContainerName: "server",
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: testimages.JVMAppRef, ImagePullPolicy: corev1.PullNever,
			Command: []string{"sh", "-c", script},
			// The target runs as nobody; reading another user's
			// /proc/<pid>/root takes CAP_SYS_PTRACE.
			SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
				Add: []corev1.Capability{"SYS_PTRACE"}}},
		},
	})
	if _, err := env.Clientset().CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, "target", p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var exit int32 = -1
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := env.Clientset().CoreV1().Pods(ns).Get(ctx, "target", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, s := range p.Status.EphemeralContainerStatuses {
			if s.Name == "debugger" && s.State.Terminated != nil {
				exit = s.State.Terminated.ExitCode
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("ephemeral container did not finish: %v", err)
	}
	logs, err := env.Clientset().CoreV1().Pods(ns).GetLogs("target", &corev1.PodLogOptions{Container: "debugger"}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := string(logs)
	if exit != 0 || !strings.Contains(out, "pid=") {
		t.Fatalf("ephemeral container did not see the target's echo server (exit %d):\n%s", exit, out)
	}
	// The target image holds only /echoserver, so seeing it (and no Debian
	// /bin) proves the listing is of the target's root, not the debugger's.
	entries := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		entries[strings.TrimSpace(line)] = true
	}
	if !entries["echoserver"] || entries["bin"] {
		t.Fatalf("listing of /proc/<pid>/root is not the echo image's root:\n%s", out)
	}
}

func TestPodIPAnswersHTTPFromTheHost(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	pod := runPod(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{echoContainer()}},
	})
	_, cidr, err := net.ParseCIDR(env.PodCIDR())
	if err != nil {
		t.Fatalf("pod CIDR %q: %v", env.PodCIDR(), err)
	}
	ip := net.ParseIP(pod.Status.PodIP)
	if ip == nil || !cidr.Contains(ip) {
		t.Fatalf("pod IP %q is not in the environment's pod CIDR %s", pod.Status.PodIP, cidr)
	}
	body := httpGet(t, fmt.Sprintf("http://%s/hello", net.JoinHostPort(ip.String(), fmt.Sprint(testimages.EchoPort))))
	if want := "hello from web path=/hello\n"; body != want {
		t.Fatalf("pod answered %q, want %q", body, want)
	}
}

// httpGet fetches url; only pod IPs of this environment's bridge are used.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

// TestGarbageCollectorDeletesOwnedObjects: the controller-manager's garbage
// collector deletes what a deleted owner owned, for a built-in owner and for
// a custom resource whose CRD was installed at Start (WithCRDsFromDir).
func TestGarbageCollectorDeletesOwnedObjects(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	ctx := context.Background()
	cms := env.Clientset().CoreV1().ConfigMaps(ns)
	owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	widgets := dynamic.NewForConfigOrDie(env.Config()).Resource(schema.GroupVersionResource{
		Group: "clustertest.handlerkit.dev", Version: "v1", Resource: "widgets"}).Namespace(ns)
	widget, err := widgets.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "clustertest.handlerkit.dev/v1", "kind": "Widget", "metadata": map[string]any{"name": "owner"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, ref := range map[string]metav1.OwnerReference{
		"owned":           {APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID},
		"owned-by-widget": {APIVersion: "clustertest.handlerkit.dev/v1", Kind: "Widget", Name: widget.GetName(), UID: widget.GetUID()},
	} {
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{ref}}},
			metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := cms.Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := widgets.Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"owned", "owned-by-widget"} {
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := cms.Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("ConfigMap %s still exists two minutes after its owner was deleted: %v", name, err)
		}
	}
}

// TestImageVolumesMountImportedImagesReadOnly: a pod's image volumes
// (volumes[].image, GA and locked on in Kubernetes 1.36; containerd 2.1+
// mounts them through its CRI plugin, with no configuration) mount images
// that were imported, never pulled, found by reference with pull policy Never
// and IfNotPresent alike: the kubelet counts an image it did not pull as
// preloaded and does not check pull credentials for it
// (imagePullCredentialsVerificationPolicy NeverVerifyPreloadedImages). Each
// volume shows the image's files, read-only; an image volume of the pod's own
// container image works too.
func TestImageVolumesMountImportedImagesReadOnly(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	pod := toolboxPod(ns, "volumes")
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "echo", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{
			Reference: testimages.EchoRef, PullPolicy: corev1.PullNever}}},
		{Name: "pause", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{
			Reference: testimages.PauseRef, PullPolicy: corev1.PullIfNotPresent}}},
		{Name: "self", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{
			Reference: testimages.JVMAppRef, PullPolicy: corev1.PullNever}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "echo", MountPath: "/vol/echo"},
		{Name: "pause", MountPath: "/vol/pause", ReadOnly: true},
		{Name: "self", MountPath: "/vol/self", ReadOnly: true},
	}
	// The kubelet starts no container before its image volumes are
	// mounted: a pod whose volume it cannot mount never becomes Ready.
	runPod(t, pod)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The toolbox image (Debian) has no /echoserver and no /pause: finding
	// them proves the volumes hold the other images' files.
	script := `head -c 4 /vol/echo/echoserver | od -An -c | tr -d ' '
test -x /vol/pause/pause && echo pause-executable
test -x /vol/self/bin/sh && echo self-has-sh
if touch /vol/echo/written 2>/dev/null; then echo echo-writable; else echo echo-read-only; fi
grep -E ' /vol/(echo|pause|self) ' /proc/mounts | awk '{print $2, substr($4, 1, 2)}' | sort`
	stdout, stderr, err := exec(ctx, ns, "volumes", "toolbox", "sh", "-c", script)
	if err != nil {
		t.Fatalf("exec: %v (stderr %q)", err, stderr)
	}
	// /proc/mounts shows each volume read-only ("ro") even where the pod
	// did not ask for readOnly (/vol/echo): the kubelet makes every image
	// volume read-only.
	want := `177ELF
pause-executable
self-has-sh
echo-read-only
/vol/echo ro
/vol/pause ro
/vol/self ro
`
	if stdout != want {
		t.Fatalf("inside the pod:\n%s\nwant:\n%s(stderr %q)", stdout, want, stderr)
	}
}
