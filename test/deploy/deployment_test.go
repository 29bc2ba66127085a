package deploy

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// operatorInstalls are the kustomizations that install the operator.
var operatorInstalls = []string{"deploy", "deploy/operator", "deploy/operator/cluster-wide", "deploy/overlays/local",
	"deploy/overlays/exec", "deploy/overlays/cluster-wide-exec"}

// TestOperatorDeploymentIsHardened checks the operator's Deployment in every
// kustomization that installs it (see checkOperatorDeployment).
func TestOperatorDeploymentIsHardened(t *testing.T) {
	for _, dir := range operatorInstalls {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			checkOperatorDeployment(t, deployment(t, dir))
		})
	}
}

// checkOperatorDeployment asserts what docs/install.md promises of the
// operator's Deployment: two replicas with leader election; POD_NAME and
// POD_NAMESPACE from the downward API; liveness and readiness probes on
// /healthz and /readyz at the named metrics port the operator listens on;
// requests and limits; a non-root (runAsNonRoot, with no pinned uid or gid),
// read-only, no-capability container under the RuntimeDefault seccomp
// profile; and its own ServiceAccount.
func checkOperatorDeployment(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != "prometheus-jmx-exporter-operator" {
		t.Errorf("serviceAccountName %q", pod.ServiceAccountName)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--leader-election") && a != "--leader-election=lease" && a != "--leader-election=for-life" {
			t.Errorf("arg %s: two replicas need leader election", a)
		}
	}
	for _, e := range c.Env {
		if e.Name == "LEADER_ELECTION" && e.Value == "none" {
			t.Error("LEADER_ELECTION=none: two replicas need leader election")
		}
	}
	for name, path := range map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"} {
		e := envVar(t, d, name)
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path {
			t.Errorf("%s: %+v, want the downward API's %s", name, e, path)
		}
	}

	_, defaultPort, _ := net.SplitHostPort(sdk.DefaultMetricsAddr)
	i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "http-metrics" })
	switch {
	case i < 0:
		t.Errorf("no port named http-metrics in %+v", c.Ports)
	case slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--metrics-addr") }):
		t.Errorf("args %v: the port is checked against the default --metrics-addr", c.Args)
	case strconv.Itoa(int(c.Ports[i].ContainerPort)) != defaultPort:
		t.Errorf("http-metrics is port %d, the operator listens on %s", c.Ports[i].ContainerPort, defaultPort)
	}
	for probe, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != probe || p.HTTPGet.Port.String() != "http-metrics" {
			t.Errorf("probe %s: %+v, want an HTTP GET of %s on port http-metrics", probe, p, probe)
		}
	}

	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[res], c.Resources.Limits[res]
		if req.IsZero() || lim.IsZero() || req.Cmp(lim) > 0 {
			t.Errorf("%s: request %s, limit %s; want both, request <= limit", res, req.String(), lim.String())
		}
	}

	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || sc == nil {
		t.Fatalf("securityContext: pod %+v, container %+v", psc, sc)
	}
	if !isTrue(psc.RunAsNonRoot) && !isTrue(sc.RunAsNonRoot) {
		t.Error("runAsNonRoot is not set")
	}
	// No pinned uid or gid: OpenShift's restricted SCC assigns its own and
	// refuses a pod that pins another; elsewhere the image's numeric user
	// (65532:65532) applies, which the kubelet checks runAsNonRoot against.
	if psc.RunAsUser != nil || psc.RunAsGroup != nil || sc.RunAsUser != nil || sc.RunAsGroup != nil {
		t.Errorf("runAsUser/runAsGroup pinned (pod %v/%v, container %v/%v), want none: the image's user applies",
			psc.RunAsUser, psc.RunAsGroup, sc.RunAsUser, sc.RunAsGroup)
	}
	seccomp := psc.SeccompProfile
	if sc.SeccompProfile != nil {
		seccomp = sc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccompProfile %+v, want RuntimeDefault", seccomp)
	}
	if !isTrue(sc.ReadOnlyRootFilesystem) {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("capabilities %+v, want drop ALL and add none", sc.Capabilities)
	}
	if isTrue(sc.Privileged) {
		t.Error("privileged")
	}
}

func isTrue(b *bool) bool { return b != nil && *b }
