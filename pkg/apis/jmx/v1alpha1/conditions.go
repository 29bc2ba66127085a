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
)
