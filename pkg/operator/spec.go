package operator

// spec.go checks an exporter's spec (its defaults, its agent image and paths,
// its strategy) and loads and validates its config.

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/jvm"
)

// defaulted fills in the operator's defaults. The agent's paths are always
// the operator's own, whatever the exporter says (checkAgent refuses an
// exporter that asks for others).
func (r *Reconciler) defaulted(spec jmxv1alpha1.PrometheusJmxExporterSpec) jmxv1alpha1.PrometheusJmxExporterSpec {
	if spec.Injection.Strategy == "" {
		spec.Injection.Strategy = r.opts.DefaultStrategy
	}
	agent := jmxv1alpha1.Agent{}
	if spec.Agent != nil {
		agent.Image = spec.Agent.Image
	}
	if agent.Image == "" {
		agent.Image = r.opts.AgentImage
	}
	agent.Path, agent.AttachHelperPath = r.opts.AgentPath, r.opts.AttachHelperPath
	spec.Agent = &agent
	return spec.Defaulted()
}

// checkAgent says why the exporter's spec.agent is refused (reason and
// message), or "" when it is acceptable: its image is the operator's own or
// on the allowlist, and its paths are empty or the operator's own. Whoever
// may create an exporter must not decide what runs in other people's pods.
func (r *Reconciler) checkAgent(a *jmxv1alpha1.Agent) (reason, msg string) {
	if a == nil {
		return "", ""
	}
	if a.Image != "" && !r.imageAllowed(a.Image) {
		return jmxv1alpha1.ReasonAgentImageNotAllowed, fmt.Sprintf(
			"spec.agent.image %q is not an agent image this operator runs (allowed: %s); nothing was run in any pod: "+
				"leave spec.agent.image empty, or have an administrator add the exact reference to the operator's --allowed-agent-images (env ALLOWED_AGENT_IMAGES)",
			a.Image, strings.Join(r.allowedImages(), ", "))
	}
	for _, f := range []struct{ field, got, own, flag string }{
		{"spec.agent.path", a.Path, r.opts.AgentPath, "--agent-path"},
		{"spec.agent.attachHelperPath", a.AttachHelperPath, r.opts.AttachHelperPath, "--attach-helper-path"},
	} {
		if f.got != "" && f.got != f.own {
			return jmxv1alpha1.ReasonAgentPathNotAllowed, fmt.Sprintf(
				"%s %q differs from the operator's own %q: the paths in the agent image are fixed by the operator (its %s flag), not by exporters; nothing was run in any pod: "+
					"remove %s (it is deprecated and must be empty or equal the operator's own)",
				f.field, f.got, f.own, f.flag, f.field)
		}
	}
	return "", ""
}

// imageAllowed says whether image is the operator's agent image or on its
// allowlist (exact references).
func (r *Reconciler) imageAllowed(image string) bool {
	for _, a := range r.allowedImages() {
		if a == image {
			return true
		}
	}
	return false
}

// allowedImages is the operator's agent image, then its allowlist.
func (r *Reconciler) allowedImages() []string {
	out := []string{r.opts.AgentImage}
	for _, a := range r.opts.AllowedAgentImages {
		if a = strings.TrimSpace(a); a != "" && a != r.opts.AgentImage {
			out = appendOnce(out, a)
		}
	}
	return out
}

// rejectedCondition is ConfigValid=False for a config an agent refused.
func rejectedCondition(rc *jmxv1alpha1.RejectedConfig) metav1.Condition {
	return condition(jmxv1alpha1.ConditionConfigValid, false, jmxv1alpha1.ReasonConfigInvalid, fmt.Sprintf(
		"the agent in pod %s container %s refused the config: %s; no other JVM is given it (the JVM carries on without the agent); fix the config",
		rc.Pod, rc.Container, rc.Message))
}

func (r *Reconciler) strategyNames() []string {
	var out []string
	for k := range r.strategies {
		out = append(out, string(k))
	}
	sort.Strings(out)
	return out
}

// loadConfig reads and validates the exporter's config. A bad config never
// reaches an agent: jmx_exporter calls System.exit on one.
func (r *Reconciler) loadConfig(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, spec jmxv1alpha1.PrometheusJmxExporterSpec) ([]byte, metav1.Condition) {
	if spec.Config == nil {
		return []byte(jmxv1alpha1.DefaultExporterConfig), condition(jmxv1alpha1.ConditionConfigValid, true,
			jmxv1alpha1.ReasonDefaultConfig, "spec.config is absent; the built-in config exports every MBean attribute")
	}
	name, key := spec.Config.ConfigMapName, spec.Config.ConfigMapKey
	cm, err := r.configMaps.get(ctx, ex.Namespace, name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, condition(jmxv1alpha1.ConditionConfigValid, false, jmxv1alpha1.ReasonConfigMapNotFound,
				fmt.Sprintf("ConfigMap %s not found in namespace %s; create it with the exporter config under key %q", name, ex.Namespace, key))
		}
		return nil, condition(jmxv1alpha1.ConditionConfigValid, false, jmxv1alpha1.ReasonConfigMapNotFound,
			fmt.Sprintf("reading ConfigMap %s: %v", name, err))
	}
	data, ok := cm.Data[key]
	if !ok {
		if b, ok := cm.BinaryData[key]; ok {
			data = string(b)
		} else {
			keys := make([]string, 0, len(cm.Data))
			for k := range cm.Data {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			return nil, condition(jmxv1alpha1.ConditionConfigValid, false, jmxv1alpha1.ReasonConfigKeyNotFound,
				fmt.Sprintf("ConfigMap %s has no key %q (it has %s); set spec.config.configMapKey or add the key", name, key, strings.Join(keys, ", ")))
		}
	}
	if err := jvm.ValidateExporterConfig([]byte(data)); err != nil {
		return nil, condition(jmxv1alpha1.ConditionConfigValid, false, jmxv1alpha1.ReasonConfigInvalid,
			fmt.Sprintf("ConfigMap %s key %q: %v; no agent was touched", name, key, err))
	}
	return []byte(data), condition(jmxv1alpha1.ConditionConfigValid, true, jmxv1alpha1.ReasonConfigLoaded,
		fmt.Sprintf("ConfigMap %s key %q", name, key))
}
