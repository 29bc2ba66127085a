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

	// ConditionConfigApplied is True when every loaded agent serves the
	// current config, and False while a new config is on its way to the
	// running agents or when an agent refused it on reload (the agent then
	// keeps serving its previous config).
	ConditionConfigApplied = "ConfigApplied"

	// ConditionPodMonitorValid is present when spec.podMonitor is set: True
	// when Prometheus Operator would accept it, False (reason
	// PodMonitorSettingsInvalid) when it would refuse it, for a reason the
	// schema cannot check (PodMonitorSettings.Validate). While it is False
	// the operator's PodMonitor carries none of spec.podMonitor, so that the
	// JVMs are still scraped, with the Prometheus' own settings.
	ConditionPodMonitorValid = "PodMonitorValid"

	// ConditionNotServed is True on an exporter in a namespace that no
	// operator serves: the operator serves a list of namespaces and reports,
	// without acting, on exporters elsewhere (--report-unserved). Its message
	// names the namespaces it serves. Ready is then False with ReasonNotServed.
	ConditionNotServed = "NotServed"
)

// Condition reasons. They are CamelCase, as metav1.Condition requires, and
// each is documented with the condition type it goes with.
const (
	// ReasonPodMonitorSettingsValid (PodMonitorValid=True): spec.podMonitor
	// is in the exporter's PodMonitor.
	ReasonPodMonitorSettingsValid = "PodMonitorSettingsValid"

	// ReasonPodMonitorSettingsInvalid (PodMonitorValid=False): Prometheus
	// Operator would refuse spec.podMonitor; the message says why.
	ReasonPodMonitorSettingsInvalid = "PodMonitorSettingsInvalid"

	// ReasonAllInjected (Ready=True): every selected JVM has the agent.
	ReasonAllInjected = "AllInjected"

	// ReasonInjectionPending (Ready=False): some pods are not injected yet,
	// for example because they are not running.
	ReasonInjectionPending = "InjectionPending"

	// ReasonNotServed (NotServed=True, Ready=False): the exporter is in a
	// namespace the operator does not serve; nothing happens to its pods.
	ReasonNotServed = "NotServed"

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
	// exporter YAML (the operator's own check), or a JVM's agent refused it
	// with the collector's own message (status.rejectedConfig); no other JVM
	// gets this config. As a per-container failure it names the container
	// whose agent refused it.
	ReasonConfigInvalid = "ConfigInvalid"

	// ReasonConfigTooLarge (ConfigValid=False): the config is larger than
	// the operator accepts (256 KiB, or 32 KiB once compressed; see
	// docs/operator.md); no agent was touched.
	ReasonConfigTooLarge = "ConfigTooLarge"

	// ReasonConfigInUse (ConfigApplied=True): every loaded agent serves the
	// current config. The message carries the agents' notes, such as a
	// changed httpServer section that takes effect at the JVM's next start.
	ReasonConfigInUse = "ConfigInUse"

	// ReasonConfigPending (ConfigApplied=False): some agents still serve an
	// earlier config; the operator is giving them the current one.
	ReasonConfigPending = "ConfigPending"

	// ReasonConfigRejected (ConfigApplied=False): an agent refused the
	// current config on reload and keeps serving its previous one; the
	// message is the agent's. It also makes ConfigValid False.
	ReasonConfigRejected = "ConfigRejected"

	// ReasonJVMEndedAfterInjection (Degraded=True): a JVM ended during a
	// load of the agent or within the breaker window after one; the
	// exporter's circuit breaker is open (status.circuitBreaker) and no
	// other container is injected until the exporter's spec or config
	// changes.
	ReasonJVMEndedAfterInjection = "JVMEndedAfterInjection"

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
	// ReasonAgentImageNotAllowed (Degraded=True, Ready=False):
	// spec.agent.image is neither the operator's --agent-image nor on its
	// --allowed-agent-images; no container is added to any pod and nothing
	// runs in one. The message names the image and how an administrator
	// allows it.
	ReasonAgentImageNotAllowed = "AgentImageNotAllowed"
	// ReasonAgentPathNotAllowed (Degraded=True, Ready=False):
	// spec.agent.path or spec.agent.attachHelperPath differs from the
	// operator's own (--agent-path, --attach-helper-path); those paths are
	// fixed by the operator, and the exporter is not acted on until the field
	// is emptied.
	ReasonAgentPathNotAllowed = "AgentPathNotAllowed"
	// ReasonStrategyDisabled (Degraded=True, Ready=False):
	// spec.injection.strategy names a strategy that this operator does not
	// use (its --strategies flag; Exec is opt-in); no pod is touched.
	ReasonStrategyDisabled = "StrategyDisabled"
	// ReasonStatusRefused (Degraded=True): the API server refused the
	// status the operator computed as invalid; the operator wrote a reduced
	// status instead (without the list the server refused) and does not
	// write the refused one again. The message carries the server's words.
	ReasonStatusRefused = "StatusRefused"
	// ReasonOptedOut (Ready=False): every pod the selector matches is
	// labelled jmx.handlerkit.dev/inject=false (its owner opted out): the
	// operator attaches to, reconfigures and evicts none of them and leaves
	// their annotations as they are. When only some opted out, Ready's
	// message says how many, whatever its reason.
	ReasonOptedOut = "OptedOut"
	// ReasonNamespaceOptedOut (Ready=False): the exporter's namespace is
	// labelled jmx.handlerkit.dev/inject=false: nothing is done to any of
	// its pods, at start or by attach.
	ReasonNamespaceOptedOut = "NamespaceOptedOut"
	// ReasonNamespaceUnreadable (Degraded=True, Ready=False): the operator
	// cannot read the exporter's namespace (get on namespaces, its RBAC) to
	// honour an opt-out label there, so it does nothing to the namespace's
	// pods until it can; the message names the error and the grant.
	ReasonNamespaceUnreadable = "NamespaceUnreadable"
	// ReasonNotInjectedAtStart (Ready=False): with spec.injection.mode
	// AtStart, selected pods run without the agent because they were created
	// without it (before the exporter, or while the operator's admission
	// webhook was unavailable). They get it when they are next created, for
	// example by a rollout; they are never attached in this mode.
	ReasonNotInjectedAtStart = "NotInjectedAtStart"
	// ReasonConfigAtNextStart (ConfigApplied=False): agents given at start
	// (status.metricsEndpoints[].injectedBy AtStart) serve an earlier config.
	// Such an agent reads its config once, when its JVM starts, from the
	// pod's spec: the current config reaches it when the pod is next created
	// (a rollout), not when its container restarts. The message says how many
	// pods and which.
	ReasonConfigAtNextStart = "ConfigAtNextStart"
	// ReasonWebhookDisabled (Degraded=True): spec.injection.mode is AtStart
	// or Both, but the operator runs without its admission webhook
	// (--webhook=off): no pod gets the agent at start, and restartOnRefusal
	// evicts nothing (a recreated pod would come back without the agent).
	ReasonWebhookDisabled = "WebhookDisabled"
	// ReasonRestartOnRefusalStopped (Degraded=True; also the Warning Event
	// on the exporter): spec.injection.restartOnRefusal evicted a pod whose
	// replacement did not get the agent at start, did not appear, or did
	// not become ready within the operator's --replacement-wait; the
	// operator evicts no more of the exporter's pods until its spec changes
	// (metadata.generation). status.restartOnRefusal.stopped says which
	// pod, controller and why (one of the RestartStop reasons).
	ReasonRestartOnRefusalStopped = "RestartOnRefusalStopped"
)

// Why spec.injection.restartOnRefusal stopped
// (status.restartOnRefusal.stopped.reason).
const (
	// RestartStopReplacementNotInjected: the evicted pod's replacement was
	// created without the agent at start (the admission webhook did not
	// inject it: unreachable, failed, or the exporter could not act).
	RestartStopReplacementNotInjected = "ReplacementNotInjected"
	// RestartStopReplacementMissing: no replacement of the evicted pod
	// appeared within --replacement-wait after it was gone (its controller
	// could not create one, for example because an admission policy refuses
	// pods with the agent, or it was scaled down).
	RestartStopReplacementMissing = "ReplacementMissing"
	// RestartStopReplacementNotReady: the replacement did not run and
	// become ready within --replacement-wait after it was created.
	RestartStopReplacementNotReady = "ReplacementNotReady"
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
	// ReasonAttachRefused: with spec.injection.mode Both, the running JVM
	// refuses a live attach (AttachDisabled or DynamicLoadingDisabled); the
	// pod gets the agent at start when it is next created, for example by a
	// rollout, or at once with spec.injection.restartOnRefusal.
	ReasonAttachRefused = "AttachRefused"
	// ReasonPortInUse: something in the pod already uses the agent's port.
	ReasonPortInUse = "PortInUse"
	// ReasonAgentStartFailed: the JVM loaded the agent and the agent failed
	// to start; a second load could kill the JVM, so it is never retried.
	ReasonAgentStartFailed = "AgentStartFailed"

	// ReasonAgentLineNotSeen (an Event): a container given the agent at
	// start whose agent's line the operator did not find in the start of
	// the container's log within its reads (docs/atstart.md); the container
	// is reported pending, not serving.
	ReasonAgentLineNotSeen = "AgentLineNotSeen"
	// ReasonAgentAlreadyPresent: a jmx_exporter agent or collector already
	// runs in the JVM (for example as -javaagent); a second one is not
	// loaded.
	ReasonAgentAlreadyPresent = "AgentAlreadyPresent"
	// ReasonRootInaccessible: jmx-attach cannot open the JVM's root
	// (/proc/<pid>/root).
	ReasonRootInaccessible = "RootInaccessible"
	// ReasonInsufficientMemory: the container's memory limit leaves less
	// room than the agent needs; loading it could get the JVM OOM-killed.
	ReasonInsufficientMemory = "InsufficientMemory"
	// ReasonJVMUnsupported: the agent refused to start because the JVM
	// lacks a module it needs (jdk.httpserver or java.management, as in a
	// jlink-trimmed runtime).
	ReasonJVMUnsupported = "JVMUnsupported"
	// ReasonCopyFailed: the agent and config cannot be copied into the
	// JVM's filesystem safely (no writable, private /tmp).
	ReasonCopyFailed = "CopyFailed"
	// ReasonPatchRefused: the API server refused to add the ephemeral
	// container or to open the exec (Pod Security, an admission webhook,
	// RBAC, validation); nothing ran in the pod.
	ReasonPatchRefused = "PatchRefused"
	// ReasonEphemeralContainerBudgetExhausted: the pod already has the
	// operator's budget of ephemeral containers (--ephemeral-container-budget);
	// ephemeral containers cannot be removed, so no more are added.
	ReasonEphemeralContainerBudgetExhausted = "EphemeralContainerBudgetExhausted"
	// ReasonTooManyAttempts: every attempt the operator allows for one
	// container start failed transiently; the message names the last cause.
	// For a reload (ConfigApplied=False), every attempt at one config.
	ReasonTooManyAttempts = "TooManyAttempts"
	// ReasonExecOutputTooLarge: an exec of the Exec strategy printed more
	// than the operator reads of each stream (inject.MaxExecOutput, 256 KiB):
	// the exec was stopped; the target's /bin/sh prints without end.
	ReasonExecOutputTooLarge = "ExecOutputTooLarge"
	// ReasonJVMEnded: the JVM ended while its agent was being loaded
	// (jmx-attach's process-gone); it trips the circuit breaker
	// (ReasonJVMEndedAfterInjection).
	ReasonJVMEnded = "JVMEnded"
	// ReasonChangeBeingTried: the exporter's change (a generation and config
	// that no JVM has run for the breaker window) is being tried on one pod
	// at its start (status.atStartCanary); the webhook creates the other
	// pods without the agent meanwhile.
	ReasonChangeBeingTried = "ChangeBeingTried"
	// ReasonHarmedPodReplaced: the pod whose JVM ended after it was given
	// the agent at start (it opened the circuit breaker) was evicted, so
	// that its controller recreates it; the breaker being open, the webhook
	// creates the new pod without the agent.
	ReasonHarmedPodReplaced = "HarmedPodReplaced"
	// ReasonHarmedPodNotReplaced: that pod could not be evicted (it has no
	// controller, or the eviction was refused); the reason says what to do.
	ReasonHarmedPodNotReplaced = "HarmedPodNotReplaced"
)

// Reasons of the operator's Events and of the conditions that were kept
// elsewhere before: every reason the operator writes is a constant of this
// package.
const (
	// ReasonWaitingForJVM (Ready=False): no JVM was found yet in the
	// selected containers of every matched pod, and they are looked at again
	// for one that starts late. NoJVMFound is left for containers that are
	// no longer looked at.
	ReasonWaitingForJVM = "WaitingForJVM"
	// ReasonPodMonitorNameTaken (a Warning Event on the exporter): a
	// PodMonitor named like the exporter exists and the exporter does not
	// control it.
	ReasonPodMonitorNameTaken = "PodMonitorNameTaken"
	// ReasonAtStartRecordInvalid names, in the InjectionFailed message, a
	// pod whose record of the agent at start (the webhook's annotation)
	// cannot be read.
	ReasonAtStartRecordInvalid = "AtStartRecordInvalid"
	// ReasonEvictedOnRefusal (a Normal Event on the pod and the exporter):
	// spec.injection.restartOnRefusal evicted a pod whose JVM refuses a live
	// attach, so that its controller recreates it with the agent at start.
	ReasonEvictedOnRefusal = "EvictedOnRefusal"
	// ReasonEvictionRefused (a Warning Event on the pod and the exporter):
	// the API server refused that eviction (429: a PodDisruptionBudget
	// allows no disruption now; or RBAC); it is retried with backoff.
	ReasonEvictionRefused = "EvictionRefused"
	// ReasonEvictionSkipped (a Warning Event on the pod and the exporter):
	// the pod has no controller, so an eviction would only delete it; the
	// operator never does.
	ReasonEvictionSkipped = "EvictionSkipped"
	// ReasonLeftSelector (a Normal Event on the pod and the exporter): the
	// pod no longer matches the exporter's selector; the operator removed
	// its annotations and its record (loaded agents keep running).
	ReasonLeftSelector = "LeftSelector"
	// ReasonFinalized (a Normal Event on the exporter): the exporter is
	// being deleted; the operator removed its annotations from the pods.
	ReasonFinalized = "Finalized"
	// ReasonInjected (a Normal Event on the pod, and on the exporter for a
	// container's first start): the agent was loaded into the container's
	// JVMs.
	ReasonInjected = "Injected"
	// ReasonInjectionRetry (a Warning Event on the pod and the exporter): a
	// load failed transiently and is retried with backoff.
	ReasonInjectionRetry = "InjectionRetry"
	// ReasonReconfigured (a Normal Event on the pod and the exporter): the
	// loaded agents reloaded the current config.
	ReasonReconfigured = "Reconfigured"
	// ReasonReconfigureRetry (a Warning Event on the pod and the exporter):
	// giving the agents the current config failed transiently and is
	// retried with backoff.
	ReasonReconfigureRetry = "ReconfigureRetry"
	// ReasonReconfigureFailed is the reason, in the operator's metrics, of
	// a reload that failed transiently.
	ReasonReconfigureFailed = "ReconfigureFailed"
	// ReasonUnknown is the reason, in the operator's metrics and in the
	// retry's message, of a strategy's error that says nothing more.
	ReasonUnknown = "Unknown"
	// ReasonInvalidRequest: jmx-attach refused the operator's request (a
	// permanent failure).
	ReasonInvalidRequest = "InvalidRequest"
)

// The reasons of jmx-attach's other results (pkg/jvm's Reason, result line
// "reason=..."), as a container's failure, its Events and the operator's
// metrics name them: one for each, so that every reason the operator
// writes is here (pkg/operator's TestEveryAttachReasonHasItsConstant fails
// when jmx-attach gains a reason without one). Transient ones are retried
// with backoff; the others wait for the container's next start or a new
// generation or config.
const (
	// ReasonNotJVM: the process is not a HotSpot JVM; it was not signalled
	// (permanent).
	ReasonNotJVM = "NotJvm"
	// ReasonTooYoung: the wait for the JVM to reach its minimum age ended
	// first (transient).
	ReasonTooYoung = "TooYoung"
	// ReasonSignalNotHandled: the JVM has no attach listener and does not
	// handle SIGQUIT, which would end it; it was not signalled (permanent).
	ReasonSignalNotHandled = "SigquitNotHandled"
	// ReasonAgentJarInvalid: the agent jar is missing, unreadable, or has no
	// Agent-Class (permanent).
	ReasonAgentJarInvalid = "AgentJarInvalid"
	// ReasonPortNotPermitted: the port is privileged in the JVM's network
	// namespace and the JVM lacks CAP_NET_BIND_SERVICE (permanent).
	ReasonPortNotPermitted = "PortNotPermitted"
	// ReasonPortCheckFailed: the port could not be checked in the JVM's
	// network namespace; nothing was loaded rather than risk the JVM
	// (permanent).
	ReasonPortCheckFailed = "PortCheckFailed"
	// ReasonArgsTooLong: the agent's arguments exceed what the attach
	// protocol carries (permanent).
	ReasonArgsTooLong = "ArgsTooLong"
	// ReasonAttachTimeout: the JVM did not open its attach socket in time
	// (transient).
	ReasonAttachTimeout = "AttachTimeout"
	// ReasonConnectFailed: the attach socket could not be connected or
	// talked to (transient).
	ReasonConnectFailed = "ConnectFailed"
	// ReasonAgentLoadFailed: the JVM refused or failed to load the agent
	// (permanent).
	ReasonAgentLoadFailed = "AgentLoadFailed"
	// ReasonAgentNotListening: an agent was loaded before but its port does
	// not listen; it is not loaded twice (permanent).
	ReasonAgentNotListening = "AgentNotListening"
	// ReasonHTTPCheckFailed: the agent was loaded but its port did not
	// answer HTTP in time (transient).
	ReasonHTTPCheckFailed = "HttpCheckFailed"
	// ReasonProcAccessDenied: jmx-attach may not read the JVM's /proc
	// entries; the message names the capabilities it lacks (permanent).
	ReasonProcAccessDenied = "ProcAccessDenied"
	// ReasonLockFailed: the per-JVM lock that keeps two injections of one
	// JVM apart could not be taken; nothing was loaded (permanent).
	ReasonLockFailed = "LockFailed"
	// ReasonNotInjected: a reconfiguration found no marker of an earlier
	// injection into the JVM; nothing was changed (permanent).
	ReasonNotInjected = "NotInjected"
	// ReasonBundleInvalid: the bundle jmx-attach read is not a tar stream of
	// exactly the expected entries within their limits (permanent).
	ReasonBundleInvalid = "BundleInvalid"
	// ReasonTruncated: not every result of jmx-attach fitted in its
	// termination log (transient).
	ReasonTruncated = "Truncated"
	// ReasonInternal: any other failure of jmx-attach (transient).
	ReasonInternal = "Internal"
	// ReasonContainerNotFound: not one process of the named container could
	// be identified; nothing was touched (permanent).
	ReasonContainerNotFound = "ContainerNotFound"
)
