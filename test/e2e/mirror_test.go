package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/handlerkit/handlerkit/internal/manifest"
	"github.com/handlerkit/handlerkit/internal/testbuild"
	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
)

// The mirror's name of the release image: mirrorAgentRef (trust_test.go),
// the same image loaded under a second name.
const (
	mirrorRepository = "localhost/handlerkit/jmx-agent-mirror"
	mirrorTag        = "v1"
)

// namespacedOnly keeps the namespaced objects of an install: the CRD is in
// place already, and the cluster-scoped objects (the users' ClusterRoles,
// the unserved ClusterRole) would be shared between the tests' operators.
// The one exception is the ClusterRole that reads the namespaces' opt-out
// label, without which the operator leaves every pod alone: it and its
// binding are kept, renamed after ns.
func namespacedOnly(objs []*unstructured.Unstructured, ns string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if k := o.GetKind(); (k == "ClusterRole" || k == "ClusterRoleBinding") && strings.HasSuffix(o.GetName(), "-namespaces") {
			o.SetName(o.GetName() + "-" + ns)
			if k == "ClusterRoleBinding" {
				ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
				_ = unstructured.SetNestedField(o.Object, ref+"-"+ns, "roleRef", "name")
			}
			out = append(out, o)
			continue
		}
		switch o.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding", "Deployment":
			if o.GetKind() == "Deployment" {
				_ = unstructured.SetNestedField(o.Object, int64(1), "spec", "replicas")
			}
			out = append(out, o)
		}
	}
	return out
}

// installMirrored applies objs in ns, checks that the operator's Deployment
// runs the mirrored image, and that an exporter that names no image gets an
// ephemeral container of that image, which loads the agent.
func installMirrored(t *testing.T, ns string, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := t.Context()
	applier, err := manifest.NewApplier(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	objs = namespacedOnly(objs, ns)
	t.Cleanup(func() {
		for _, o := range objs {
			switch o.GetKind() {
			case "ClusterRoleBinding":
				_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
			case "ClusterRole":
				_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
			}
		}
	})
	if err := applier.Apply(ctx, ns, objs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dumpOperatorLogs(t, ns) })
	dep, err := kube.AppsV1().Deployments(ns).Get(ctx, operatorName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != mirrorAgentRef {
		t.Fatalf("the operator's Deployment runs %s, want the mirror's %s", c.Image, mirrorAgentRef)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--agent-image") {
			t.Errorf("the install passes %s: the agent image should follow the operator's own", a)
		}
	}
	waitFor(t, 3*time.Minute, "the operator is ready", func() (bool, string) {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, operatorName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.ReadyReplicas >= 1, fmt.Sprintf("ready %d", d.Status.ReadyReplicas)
	})
	labels := map[string]string{"app": "mirrored"}
	createPod(t, ns, jvmPod("jvm", labels, testimages.JVMAppRef))
	waitRunning(t, ns, "jvm")
	createExporter(t, ns, exporter("mirrored", labels))
	checkInjected(t, ns, "mirrored", "jvm", jmxv1alpha1.DefaultPort)
	_, pod := injectedRecord(t, ns, "jvm")
	if len(pod.Spec.EphemeralContainers) != 1 {
		t.Fatalf("%d ephemeral containers, want 1", len(pod.Spec.EphemeralContainers))
	}
	if img := pod.Spec.EphemeralContainers[0].Image; img != mirrorAgentRef {
		t.Errorf("the ephemeral container runs %s, want the operator's own (mirrored) image %s", img, mirrorAgentRef)
	}
}

// TestMirroredInstallRunsTheMirroredAgentImage installs the operator as an
// admin who mirrors its image does, once with a kustomize overlay's images:
// rewrite of deploy/operator and once with the Helm chart's image.repository,
// with no agent setting at all, and sees the ephemeral container pull the
// mirror's image: the operator reads its own image from its pod.
func TestMirroredInstallRunsTheMirroredAgentImage(t *testing.T) {
	t.Parallel()
	loadMirrorAgent(t)
	runTogether(t, subtest{"kustomize", func(t *testing.T) {
		ns := newNamespace(t, "e2e-mirror-kustomize", nil)
		dir := t.TempDir()
		rel, err := filepath.Rel(dir, filepath.Join(repoRoot, "deploy", "operator"))
		if err != nil {
			t.Fatal(err)
		}
		k := fmt.Sprintf("namespace: %s\nresources:\n- %s\nimages:\n- name: ghcr.io/handlerkit/jmx-agent\n  newName: %s\n  newTag: %s\n",
			ns, rel, mirrorRepository, mirrorTag)
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
		objs, err := manifest.Build(dir)
		if err != nil {
			t.Fatal(err)
		}
		installMirrored(t, ns, objs)
	}}, subtest{"helm", func(t *testing.T) {
		ns := newNamespace(t, "e2e-mirror-helm", nil)
		objs := renderChart(t, ns, fmt.Sprintf("image:\n  repository: %s\n  tag: %s\nreplicas: 1\n", mirrorRepository, mirrorTag))
		installMirrored(t, ns, objs)
	}})
}

// renderChart renders charts/prometheus-jmx-exporter-operator for namespace
// with values over the chart's, through test/helm's helm-render (test/helm is
// a module of its own, so that Helm never enters handlerkit's go.mod).
func renderChart(t *testing.T, namespace, values string) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	bins, err := testbuild.Build(t.Context(), filepath.Join(repoRoot, "test", "helm"), dir, testbuild.Flags(), nil,
		"./cmd/helm-render")
	if err != nil {
		t.Fatalf("building test/helm's helm-render: %v", err)
	}
	bin := bins[0]
	vals := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(vals, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-chart", filepath.Join(repoRoot, "charts", "prometheus-jmx-exporter-operator"), "-namespace", namespace, "-values", vals)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm-render: %v: %s", err, stderr.String())
	}
	objs, err := manifest.Decode(stdout.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
