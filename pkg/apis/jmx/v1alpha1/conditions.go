package v1alpha1

// Condition types of PrometheusJmxExporterStatus.Conditions.
const (
	// ConditionReady is True when every selected JVM in every matched pod
	// has the agent loaded and serving, and False while injection is pending
	// or has failed somewhere. It drives the Ready printer column.
	ConditionReady = "Ready"

	// ConditionConfigValid is True when the exporter configuration (the
	// referenced ConfigMap key, or DefaultExporterConfig) exists and parses.
	// While it is False no new injection is attempted, because a bad config
	// would only make every agent fail the same way.
	ConditionConfigValid = "ConfigValid"

	// ConditionDegraded is True when some, but not necessarily all, pods
	// failed injection; Ready can be False for a benign reason (still
	// injecting) and Degraded tells the two apart.
	ConditionDegraded = "Degraded"
)

// Condition reasons. They are CamelCase, as metav1.Condition requires, and
// each is documented with the condition type it goes with.
const (
	// ReasonAllInjected (Ready=True): every selected JVM has the agent.
	ReasonAllInjected = "AllInjected"

	// ReasonInjectionPending (Ready=False): some pods are not injected yet,
	// for example because they are not running.
	ReasonInjectionPending = "InjectionPending"

	// ReasonNoPodsMatched (Ready=False): the selector matches no pod.
	ReasonNoPodsMatched = "NoPodsMatched"

	// ReasonNoJVMFound (Ready=False): matched containers run no JVM.
	ReasonNoJVMFound = "NoJVMFound"

	// ReasonConfigLoaded (ConfigValid=True): the referenced ConfigMap key
	// exists and parses.
	ReasonConfigLoaded = "ConfigLoaded"

	// ReasonDefaultConfig (ConfigValid=True): spec.config is absent and
	// DefaultExporterConfig applies.
	ReasonDefaultConfig = "DefaultConfig"

	// ReasonConfigMapNotFound (ConfigValid=False): the ConfigMap is missing.
	ReasonConfigMapNotFound = "ConfigMapNotFound"

	// ReasonConfigKeyNotFound (ConfigValid=False): the ConfigMap lacks the key.
	ReasonConfigKeyNotFound = "ConfigKeyNotFound"

	// ReasonConfigInvalid (ConfigValid=False): the document is not valid
	// exporter YAML; the message carries the parse error.
	ReasonConfigInvalid = "ConfigInvalid"

	// ReasonInjectionFailed (Degraded=True, Ready=False): loading the agent
	// failed in at least one pod; the message names pods and errors.
	ReasonInjectionFailed = "InjectionFailed"

	// ReasonAsExpected (Degraded=False): nothing has failed.
	ReasonAsExpected = "AsExpected"
	// ReasonSelectorConflict (Degraded=True): another, older exporter
	// selects some of the same pods; the older one injects them and this one
	// leaves them alone. The message names the other exporter and the pods.
	ReasonSelectorConflict = "SelectorConflict"
	// ReasonPortChangePending (Degraded=True): spec.port changed, and some
	// agents still serve the old port until their containers restart
	// (status.portPendingPods).
	ReasonPortChangePending = "PortChangePending"
	// ReasonInvalidSelector (ConfigValid=False): spec.selector does not
	// convert to a label selector.
	ReasonInvalidSelector = "InvalidSelector"
)

// Permanent injection failure reasons. They appear in Events, in the
// operator's metrics and in the InjectionFailed message; the operator never
// retries them on the same container start, because loading an agent twice,
// or into a JVM that refuses it, can harm the JVM.
const (
	// ReasonAttachDisabled: the JVM runs with -XX:+DisableAttachMechanism.
	ReasonAttachDisabled = "AttachDisabled"
	// ReasonDynamicLoadingDisabled: the JVM runs with
	// -XX:-EnableDynamicAgentLoading.
	ReasonDynamicLoadingDisabled = "DynamicLoadingDisabled"
	// ReasonPortInUse: something in the pod already uses the agent's port.
	ReasonPortInUse = "PortInUse"
	// ReasonAgentStartFailed: the JVM loaded the agent and the agent failed
	// to start; a second load could kill the JVM, so it is never retried.
	ReasonAgentStartFailed = "AgentStartFailed"
)
