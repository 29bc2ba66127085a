package e2e

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/testenv/freeport"
)

// TestHostNetworkPodsAgentBindsThePodIPOnly: a hostNetwork pod's network namespace is the node's, here this
// machine's (the node's IP, and so such a pod's, is 127.0.0.1). Its agent, attached live or given at start,
// serves on the pod's IP and on no other address of the node: 127.0.0.2, also on lo, has nothing on the port.
func TestHostNetworkPodsAgentBindsThePodIPOnly(t *testing.T) {
	t.Parallel()
	op := deployAtStartOperator(t, "e2e-hostnet")
	runTogether(t,
		subtest{"Attach", func(t *testing.T) { hostNetworkAgent(t, op.ns, jmxv1alpha1.InjectionModeAttach) }},
		subtest{"AtStart", func(t *testing.T) { hostNetworkAgent(t, op.ns, jmxv1alpha1.InjectionModeAtStart) }},
	)
}

func hostNetworkAgent(t *testing.T, ns string, mode jmxv1alpha1.InjectionMode) {
	p, err := freeport.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	port := int32(p)
	name := "hostnet-" + strings.ToLower(string(mode))
	labels := map[string]string{"app": name}
	create := func() {
		createPod(t, ns, jvmPod(name, labels, testimages.JVMAppRef, func(p *corev1.Pod) { p.Spec.HostNetwork = true }))
	}
	if mode == jmxv1alpha1.InjectionModeAttach {
		create()
		waitRunning(t, ns, name)
	}
	createExporter(t, ns, exporter(name, labels, withMode(mode), func(ex *jmxv1alpha1.PrometheusJmxExporter) { ex.Spec.Port = port }))
	if mode == jmxv1alpha1.InjectionModeAtStart {
		waitWebhookInjects(t, ns, labels, name)
		create()
	}
	pod := waitRunning(t, ns, name)
	if pod.Status.PodIP != "127.0.0.1" {
		t.Logf("the node's IP is %s, not 127.0.0.1", pod.Status.PodIP)
	}
	waitScrape(t, pod.Status.PodIP, port, heapMetric)
	other := "127.0.0.2"
	if pod.Status.PodIP == other {
		other = "127.0.0.3"
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(other, strconv.Itoa(int(port))), 5*time.Second); err == nil {
		c.Close()
		t.Errorf("%s:%d accepts a connection: the agent of a hostNetwork pod binds every address of the node", other, port)
	}
	if n, lines := agentLoads(t, ns, name, "app"); n != 1 {
		t.Errorf("agent lines %q, want one", lines)
	} else if want := fmt.Sprintf("serving on %s:%d", pod.Status.PodIP, port); !strings.Contains(lines[0], want) {
		t.Errorf("agent line %q, want %q", lines[0], want)
	}
}
