package v1alpha1_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

func TestDefaultedFillsEveryUnsetField(t *testing.T) {
	spec := jmxv1alpha1.PrometheusJmxExporterSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "orders"}},
		Config:   &jmxv1alpha1.ExporterConfig{ConfigMapName: "jmx"},
	}
	got := spec.Defaulted()

	if got.Port != 9404 {
		t.Errorf("port = %d, want 9404", got.Port)
	}
	if got.Injection.Strategy != jmxv1alpha1.InjectionEphemeralContainer {
		t.Errorf("strategy = %q, want EphemeralContainer", got.Injection.Strategy)
	}
	if got.Config.ConfigMapKey != "config.yaml" {
		t.Errorf("configMapKey = %q, want config.yaml", got.Config.ConfigMapKey)
	}
	want := jmxv1alpha1.Agent{
		Image:            "ghcr.io/handlerkit/jmx-agent:v0.2.0",
		Path:             "/opt/handlerkit/jmx-agent.jar",
		AttachHelperPath: "/usr/local/bin/jmx-attach",
	}
	if got.Agent == nil || *got.Agent != want {
		t.Errorf("agent = %+v, want %+v", got.Agent, want)
	}

	// The receiver is untouched: Defaulted works on a deep copy, so an object
	// from an informer's cache can be defaulted without corrupting the cache.
	if spec.Port != 0 || spec.Injection.Strategy != "" || spec.Agent != nil || spec.Config.ConfigMapKey != "" {
		t.Errorf("Defaulted modified its receiver: %+v", spec)
	}
}

func TestDefaultedKeepsWhatIsSet(t *testing.T) {
	spec := jmxv1alpha1.PrometheusJmxExporterSpec{
		Selector:  &metav1.LabelSelector{MatchLabels: map[string]string{"app": "orders"}},
		Port:      9999,
		Injection: jmxv1alpha1.Injection{Strategy: jmxv1alpha1.InjectionExec},
		Config:    &jmxv1alpha1.ExporterConfig{ConfigMapName: "jmx", ConfigMapKey: "orders.yaml"},
		Agent:     &jmxv1alpha1.Agent{Image: "registry.example/agent:2"},
	}
	got := spec.Defaulted()
	if got.Port != 9999 || got.Injection.Strategy != jmxv1alpha1.InjectionExec || got.Config.ConfigMapKey != "orders.yaml" {
		t.Errorf("Defaulted overrode set fields: %+v", got)
	}
	if got.Agent.Image != "registry.example/agent:2" {
		t.Errorf("agent image = %q, want the override", got.Agent.Image)
	}
	if got.Agent.Path != jmxv1alpha1.DefaultAgentPath || got.Agent.AttachHelperPath != jmxv1alpha1.DefaultAttachHelperPath {
		t.Errorf("unset agent paths not defaulted next to an image override: %+v", got.Agent)
	}
	if spec.Agent.Path != "" {
		t.Errorf("Defaulted modified the receiver's agent: %+v", spec.Agent)
	}
}

func TestDefaultedLeavesConfigAbsent(t *testing.T) {
	spec := jmxv1alpha1.PrometheusJmxExporterSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "orders"}},
	}
	if got := spec.Defaulted(); got.Config != nil {
		t.Errorf("config = %+v, want nil so that DefaultExporterConfig applies", got.Config)
	}
}
