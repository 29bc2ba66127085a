package deploy

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
)

// TestTheWebhookServiceSendsAdmissionsOnlyToTheOperatorsPods applies the
// webhook Service of every install (kustomize's namespaced and cluster-wide
// ones, the Helm chart's) with kube-controller-manager's EndpointSlice
// controller running, beside a pod of the operator's Deployment template
// and a foreign pod that carries the Deployment's selector labels
// (app.kubernetes.io/name, and the chart's app.kubernetes.io/instance) and a
// port named webhook, both running (the test plays the kubelet): the
// operator's pod is an endpoint of the Service, the foreign one is not. On
// the Service that selected app.kubernetes.io/name alone, the foreign pod
// received admission requests.
func TestTheWebhookServiceSendsAdmissionsOnlyToTheOperatorsPods(t *testing.T) {
	env := cluster.Get(t)
	kube := env.Clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runControllers(t, ctx, env, "endpointslice")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "hooksvc-"}}
	node, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })

	installs := map[string]func(ns string) []*unstructured.Unstructured{
		namespacedInstall:  func(string) []*unstructured.Unstructured { return build(t, namespacedInstall) },
		clusterWideInstall: func(string) []*unstructured.Unstructured { return build(t, clusterWideInstall) },
		"the Helm chart": func(ns string) []*unstructured.Unstructured {
			waitForHelmCommands(t)
			objs, err := renderChart(t, ns, "")
			if err != nil {
				t.Fatal(err)
			}
			return objs
		},
	}
	ip := 10
	for what, objects := range installs {
		ns, err := env.CreateNamespace(ctx, "hooksvc")
		if err != nil {
			t.Fatal(err)
		}
		objs := objects(ns)
		d := deploymentOf(t, objs)
		svc := webhookOf(t, what, objs, "prometheus-jmx-exporter-operator").service
		svc.Namespace, svc.ResourceVersion = ns, ""
		if _, err := kube.CoreV1().Services(ns).Create(ctx, &svc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		// The foreign pod runs first: once the operator's pod is an
		// endpoint, the controller has seen it.
		foreign := runningPod(t, ctx, kube, ns, node.Name, "foreign", d.Spec.Selector.MatchLabels, ip)
		own := runningPod(t, ctx, kube, ns, node.Name, "operator", d.Spec.Template.Labels, ip+1)
		ip += 2
		var addrs []string
		for !slices.Contains(addrs, own) {
			list, err := kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
			if err != nil {
				t.Fatal(err)
			}
			addrs = nil
			for _, s := range list.Items {
				for _, e := range s.Endpoints {
					addrs = append(addrs, e.Addresses...)
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: the operator's pod (%s) never became an endpoint of Service %s (selector %v): endpoints %v", what, own, svc.Name, svc.Spec.Selector, addrs)
			case <-time.After(100 * time.Millisecond):
			}
		}
		if slices.Contains(addrs, foreign) {
			t.Errorf("%s: a pod labelled %v with a port webhook (%s) is an endpoint of Service %s (selector %v): it receives admission requests",
				what, d.Spec.Selector.MatchLabels, foreign, svc.Name, svc.Spec.Selector)
		}
	}
}

// runningPod creates a pod named name on node with labels and a port
// webhook, and plays the kubelet: it runs and is ready at 10.244.0.<ip>,
// which it returns.
func runningPod(t *testing.T, ctx context.Context, kube kubernetes.Interface, ns, node, name string, labels map[string]string, ip int) string {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.PodSpec{NodeName: node,
		Containers: []corev1.Container{{Name: "app", Image: "app", Ports: []corev1.ContainerPort{{Name: "webhook", ContainerPort: 9443}}}}}}
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	addr := "10.244.0." + strconv.Itoa(ip)
	for {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, addr, []corev1.PodIP{{IP: addr}}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Ready: true, Image: "app", ImageID: "sha256:1", ContainerID: "containerd://" + name,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
		_, err = kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err == nil {
			return addr
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
}
