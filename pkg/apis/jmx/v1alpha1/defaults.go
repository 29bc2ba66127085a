package v1alpha1

// The agent defaults. They live in Go, not in the CRD schema, for the image
// and paths: a schema default would be written into every stored object, so
// upgrading the operator would leave existing exporters on the old agent.
// Port and strategy are schema defaults because they are part of what a user
// sees and relies on (the port ends up in scrape configs).
const (
	// DefaultAgentImage is the image that carries the agent jar and the
	// attach helper when spec.agent.image is empty.
	DefaultAgentImage = "ghcr.io/handlerkit/jmx-agent:v0.2.0"

	// DefaultAttachHelperPath is where the attach helper lives in
	// DefaultAgentImage.
	DefaultAttachHelperPath = "/usr/local/bin/jmx-attach"

	// DefaultAgentPath is where the project's JMX exporter java agent jar
	// (agent/, docs/agent.md) lives in DefaultAgentImage.
	DefaultAgentPath = "/opt/handlerkit/jmx-agent.jar"

	// DefaultPort is the port the agent serves on when spec.port is unset;
	// 9404 is the port the JMX exporter's own documentation uses.
	DefaultPort int32 = 9404

	// DefaultInjectionStrategy is the strategy used when
	// spec.injection.strategy is unset. docs/api.md explains the choice.
	DefaultInjectionStrategy = InjectionEphemeralContainer

	// DefaultInjectionMode is the mode used when spec.injection.mode is
	// unset: live attach, as before start-time injection existed.
	DefaultInjectionMode = InjectionModeAttach

	// DefaultConfigMapKey is the ConfigMap key read when
	// spec.config.configMapKey is unset.
	DefaultConfigMapKey = "config.yaml"

	// DefaultExporterConfig is the exporter configuration used when
	// spec.config is absent: every MBean attribute the exporter can turn into
	// a number is exported, with names and label names lower-cased so that
	// they follow Prometheus conventions.
	DefaultExporterConfig = `lowercaseOutputName: true
lowercaseOutputLabelNames: true
rules:
- pattern: ".*"
`
)

// Defaulted returns a copy of the spec with every unset field given its
// default. The API server applies the schema defaults (port, strategy,
// configMapKey) on write, but objects built in Go, and the Go-only defaults
// of spec.agent, need this; the operator acts on Defaulted() rather than on
// the stored spec. Config stays nil when absent: DefaultExporterConfig is a
// document, not a ConfigMap reference.
func (s *PrometheusJmxExporterSpec) Defaulted() PrometheusJmxExporterSpec {
	out := *s.DeepCopy()
	if out.Port == 0 {
		out.Port = DefaultPort
	}
	if out.Injection.Strategy == "" {
		out.Injection.Strategy = DefaultInjectionStrategy
	}
	if out.Injection.Mode == "" {
		out.Injection.Mode = DefaultInjectionMode
	}
	if out.Config != nil && out.Config.ConfigMapKey == "" {
		out.Config.ConfigMapKey = DefaultConfigMapKey
	}
	if out.Agent == nil {
		out.Agent = &Agent{}
	}
	if out.Agent.Image == "" {
		out.Agent.Image = DefaultAgentImage
	}
	if out.Agent.Path == "" {
		out.Agent.Path = DefaultAgentPath
	}
	if out.Agent.AttachHelperPath == "" {
		out.Agent.AttachHelperPath = DefaultAttachHelperPath
	}
	return out
}
