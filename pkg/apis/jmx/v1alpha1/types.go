package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PrometheusJmxExporter asks the operator to load the Prometheus JMX exporter
// java agent into the JVMs of the pods its selector matches, so that each JVM
// serves its MBeans as Prometheus metrics on spec.port.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=pje,categories=handlerkit
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.spec.port`
// +kubebuilder:printcolumn:name="Matched",type=integer,JSONPath=`.status.matchedPods`
// +kubebuilder:printcolumn:name="Injected",type=integer,JSONPath=`.status.injectedPods`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failedPods`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PrometheusJmxExporter struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says which JVMs get the agent and how it is configured.
	// +required
	Spec PrometheusJmxExporterSpec `json:"spec"`

	// Status is written by the operator only, through the status subresource.
	// +optional
	Status PrometheusJmxExporterStatus `json:"status,omitempty"`
}

// PrometheusJmxExporterSpec is the desired state of a PrometheusJmxExporter.
type PrometheusJmxExporterSpec struct {
	// Selector picks the pods, in the exporter's namespace, whose JVMs get the
	// agent. It must set matchLabels or matchExpressions: an empty selector
	// would match every pod in the namespace, which is never what anyone means.
	// +required
	// +kubebuilder:validation:XValidation:rule="has(self.matchLabels) && size(self.matchLabels) > 0 || has(self.matchExpressions) && size(self.matchExpressions) > 0",message="selector must not be empty: set matchLabels or matchExpressions"
	Selector *metav1.LabelSelector `json:"selector"`

	// Containers restricts injection to the named containers of each matched
	// pod. When empty, every container in which a JVM is found gets the agent.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Containers []string `json:"containers,omitempty"`

	// JVMs restricts injection, within each selected container, to the JVMs
	// whose main class or jar matches one of these shell patterns (Go's
	// path.Match: *, ?, [a-z]). A jar matches by its path as the JVM was
	// started with it or by its base name, so "orders-*.jar" and
	// "com.example.Main" both work. When empty, every JVM is injected.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	JVMs []string `json:"jvms,omitempty"`

	// Config points at the exporter's YAML configuration in a ConfigMap in
	// the exporter's namespace. When absent, the built-in default applies
	// (DefaultExporterConfig): every MBean attribute is exported, with
	// lower-cased metric and label names.
	// +optional
	Config *ExporterConfig `json:"config,omitempty"`

	// Port is the TCP port on which each injected agent serves /metrics
	// inside its pod. Ports below 1024 are refused because the JVM seldom
	// runs with the privilege to bind them.
	// +optional
	// +kubebuilder:default=9404
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// Injection says how the agent is loaded into a running JVM.
	// +optional
	// +kubebuilder:default={}
	Injection Injection `json:"injection,omitempty"`

	// Agent names the image that carries the agent jar and the attach helper.
	// When absent, or for each empty field, the running operator's own
	// (its --agent-image, --agent-path and --attach-helper-path) apply. An
	// image must be on the operator's allowlist (--allowed-agent-images);
	// anything else is refused (Degraded=True) and nothing runs in any pod.
	// +optional
	Agent *Agent `json:"agent,omitempty"`

	// PodMonitor tunes the PodMonitor that the operator keeps for the
	// exporter when the cluster serves Prometheus Operator's PodMonitors: the
	// scrape interval and timeout of every endpoint, the sample limit and the
	// metric relabelings. Each field is checked as Prometheus Operator checks
	// it, so that the PodMonitor is never one it refuses. When absent, the
	// Prometheus' own settings apply.
	// +optional
	PodMonitor *PodMonitorSettings `json:"podMonitor,omitempty"`
}

// PodMonitorSettings are the fields of the exporter's PodMonitor that the
// exporter may set, with Prometheus Operator's names and formats. The schema
// checks what it can (formats, actions, which fields each action takes);
// the operator checks the rest (Validate: regular expressions compile,
// scrapeTimeout is at most interval) and reports a failure in condition
// PodMonitorValid.
// +kubebuilder:validation:XValidation:rule="!has(self.scrapeTimeout) || has(self.interval)",message="scrapeTimeout needs interval: without it, Prometheus' own scrape interval applies, which the exporter cannot know to compare"
type PodMonitorSettings struct {
	// Interval is how often Prometheus scrapes each JVM, a Prometheus
	// duration such as 30s, 1m or 1h20m15s. Default: the Prometheus' own.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`
	Interval string `json:"interval,omitempty"`

	// ScrapeTimeout bounds one scrape, a Prometheus duration no longer than
	// Interval (which it requires). Default: the Prometheus' own.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`
	ScrapeTimeout string `json:"scrapeTimeout,omitempty"`

	// SampleLimit is the most samples one scrape of one JVM may return;
	// above it Prometheus fails the scrape (up == 0). 0 or absent: no limit
	// of the exporter's own.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SampleLimit *int64 `json:"sampleLimit,omitempty"`

	// MetricRelabelings are applied by Prometheus to the scraped samples
	// before they are stored (metric_relabel_configs), in order, after
	// nothing of the operator's own: the operator relabels targets only.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	MetricRelabelings []RelabelConfig `json:"metricRelabelings,omitempty"`
}

// RelabelConfig is one Prometheus relabeling, in Prometheus Operator's
// format (its RelabelConfig); see Prometheus' relabel_config.
// +kubebuilder:validation:XValidation:rule="!(self.action.lowerAscii() in ['replace', 'hashmod', 'lowercase', 'uppercase', 'keepequal', 'dropequal']) || has(self.targetLabel) && size(self.targetLabel) > 0",message="actions replace, hashmod, lowercase, uppercase, keepequal and dropequal need targetLabel"
// +kubebuilder:validation:XValidation:rule="self.action.lowerAscii() != 'hashmod' || has(self.modulus) && self.modulus > 0",message="action hashmod needs a modulus above 0"
// +kubebuilder:validation:XValidation:rule="!(self.action.lowerAscii() in ['lowercase', 'uppercase', 'keepequal', 'dropequal']) || !has(self.replacement) || self.replacement == '$1'",message="actions lowercase, uppercase, keepequal and dropequal take no replacement"
// +kubebuilder:validation:XValidation:rule="!(self.action.lowerAscii() in ['keepequal', 'dropequal']) || (!has(self.regex) || self.regex == '(.*)') && (!has(self.modulus) || self.modulus == 0) && (!has(self.separator) || self.separator == ';')",message="actions keepequal and dropequal take only sourceLabels and targetLabel"
// +kubebuilder:validation:XValidation:rule="!(self.action.lowerAscii() in ['labeldrop', 'labelkeep']) || (!has(self.sourceLabels) || size(self.sourceLabels) == 0) && (!has(self.targetLabel) || size(self.targetLabel) == 0) && (!has(self.modulus) || self.modulus == 0) && (!has(self.separator) || self.separator == ';') && (!has(self.replacement) || self.replacement == '$1')",message="actions labeldrop and labelkeep take only regex"
type RelabelConfig struct {
	// SourceLabels are the labels whose values, joined by Separator, the
	// regex is matched against.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	SourceLabels []string `json:"sourceLabels,omitempty"`

	// Separator joins the source labels' values. Default: ;.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Separator *string `json:"separator,omitempty"`

	// TargetLabel is the label a replace, hashmod, lowercase, uppercase,
	// keepequal or dropequal action writes or compares.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	TargetLabel string `json:"targetLabel,omitempty"`

	// Regex is an RE2 regular expression, anchored at both ends, matched
	// against the joined source labels. Default: (.*).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Regex string `json:"regex,omitempty"`

	// Modulus of the hashmod action.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Modulus int64 `json:"modulus,omitempty"`

	// Replacement is what the replace action writes, with the regex's
	// groups ($1). Default: $1.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Replacement *string `json:"replacement,omitempty"`

	// Action is replace, keep, drop, hashmod, labelmap, labeldrop,
	// labelkeep, lowercase, uppercase, keepequal or dropequal, in lower or
	// Prometheus Operator's camel case.
	// +optional
	// +kubebuilder:default=replace
	// +kubebuilder:validation:Enum=replace;Replace;keep;Keep;drop;Drop;hashmod;HashMod;labelmap;LabelMap;labeldrop;LabelDrop;labelkeep;LabelKeep;lowercase;Lowercase;uppercase;Uppercase;keepequal;KeepEqual;dropequal;DropEqual
	Action string `json:"action,omitempty"`
}

// ExporterConfig names the ConfigMap key that holds the exporter's YAML
// configuration (the format of the Prometheus JMX exporter's config.yaml).
type ExporterConfig struct {
	// ConfigMapName is the name of a ConfigMap in the exporter's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ConfigMapName string `json:"configMapName"`

	// ConfigMapKey is the key, within the ConfigMap, of the YAML document.
	// +optional
	// +kubebuilder:default="config.yaml"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	ConfigMapKey string `json:"configMapKey,omitempty"`
}

// InjectionStrategy is how the operator gets the agent into a running JVM.
// +kubebuilder:validation:Enum=Exec;EphemeralContainer
type InjectionStrategy string

const (
	// InjectionExec copies the agent, the attach helper and the config into
	// the target container through the pods/exec API and runs the helper
	// there. It needs a shell and tar in the target image, and leaves no
	// trace in the pod spec.
	InjectionExec InjectionStrategy = "Exec"

	// InjectionEphemeralContainer adds an ephemeral container, built from the
	// agent image, that targets the JVM's container and shares its process
	// namespace, so the target image needs no shell, no tar and no JDK. The
	// ephemeral container stays in the pod spec until the pod is replaced.
	InjectionEphemeralContainer InjectionStrategy = "EphemeralContainer"
)

// Injection configures how and when agents are loaded.
// +kubebuilder:validation:XValidation:rule="!has(self.restartOnRefusal) || !self.restartOnRefusal || (has(self.mode) && self.mode == 'Both')",message="restartOnRefusal needs mode Both: only then does a recreated pod get the agent at start"
type Injection struct {
	// Strategy is Exec or EphemeralContainer. See docs/api.md for why
	// EphemeralContainer is the default.
	// +optional
	// +kubebuilder:default=EphemeralContainer
	Strategy InjectionStrategy `json:"strategy,omitempty"`

	// Mode is when the agent gets into the JVMs: Attach (default: running
	// JVMs, by the strategy), AtStart (only pods created from now on, through
	// the operator's admission webhook, with -javaagent in JAVA_TOOL_OPTIONS),
	// or Both (running pods are attached; pods created afterwards get the agent
	// at start and are never attached). See docs/atstart.md.
	// +optional
	// +kubebuilder:default=Attach
	Mode InjectionMode `json:"mode,omitempty"`

	// RestartOnRefusal lets the operator evict, one at a time and through the
	// eviction API (so PodDisruptionBudgets apply), the pods whose running
	// JVM refuses a live attach (reason AttachRefused), so that their
	// controller recreates them with the agent at start. Only with mode Both.
	// Off by default: the operator never restarts a pod unless told to.
	// +optional
	RestartOnRefusal bool `json:"restartOnRefusal,omitempty"`
}

// InjectionMode is when the agent is loaded: into running JVMs, at JVM start,
// or both.
// +kubebuilder:validation:Enum=Attach;AtStart;Both
type InjectionMode string

const (
	// InjectionModeAttach loads the agent into running JVMs (live attach, by
	// spec.injection.strategy) and never changes a pod at creation.
	InjectionModeAttach InjectionMode = "Attach"

	// InjectionModeAtStart gives the agent only to pods created after the
	// exporter, at creation, through the operator's mutating admission
	// webhook; running pods are reported, never attached.
	InjectionModeAtStart InjectionMode = "AtStart"

	// InjectionModeBoth attaches to running pods and gives the agent at start
	// to pods created afterwards, which are then never attached.
	InjectionModeBoth InjectionMode = "Both"
)

// InjectedBy says how a JVM got its agent.
type InjectedBy string

const (
	// InjectedByAttach: loaded into the running JVM (live attach).
	InjectedByAttach InjectedBy = "Attach"

	// InjectedByAtStart: given at the JVM's start (-javaagent in
	// JAVA_TOOL_OPTIONS, added to the pod at creation).
	InjectedByAtStart InjectedBy = "AtStart"
)

// Agent selects the image that carries the agent jar and the attach helper.
// Every field is optional; empty fields take the running operator's own, so
// that upgrading the operator upgrades the agent of every exporter that did
// not pin one. What runs in other people's pods is the operator's decision,
// not the exporter's: the image must be on the operator's allowlist and the
// paths are always the operator's.
type Agent struct {
	// Image carries the agent jar and the attach helper. It must be the
	// operator's agent image (its own image, read from its pod, unless it
	// was started with --agent-image; DefaultAgentImage,
	// ghcr.io/handlerkit/jmx-agent:v0.2.0, outside a cluster) or one of its
	// --allowed-agent-images, compared as exact
	// references; any other image is refused with Degraded=True, reason
	// AgentImageNotAllowed, and no container is added to any pod.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// Path is deprecated: the agent jar's path is fixed by the operator
	// (--agent-path, DefaultAgentPath /opt/handlerkit/jmx-agent.jar). It must
	// be empty or equal the operator's own; any other value is refused with
	// Degraded=True, reason AgentPathNotAllowed. The field stays so that such
	// an exporter is refused visibly rather than silently pruned.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^/`
	Path string `json:"path,omitempty"`

	// AttachHelperPath is deprecated: the attach helper's path is fixed by
	// the operator (--attach-helper-path, DefaultAttachHelperPath
	// /usr/local/bin/jmx-attach). It must be empty or equal the operator's
	// own; any other value is refused with Degraded=True, reason
	// AgentPathNotAllowed.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^/`
	AttachHelperPath string `json:"attachHelperPath,omitempty"`
}

// MaxEvictionSiblings bounds status.restartOnRefusal.eviction.siblings.
const MaxEvictionSiblings = 100

// MaxStatusEndpoints is the most entries the operator writes in
// status.metricsEndpoints, and in status.portPendingPods: with about 300
// bytes an entry, 100 keep the object near 30 KiB whatever the number of
// pods (5,000 entries made a 1.5 MB object, at etcd's limit). Prometheus
// finds the JVMs through the pods' annotations or the PodMonitor, never
// through this list; the counts (metricsEndpointCount, portPendingPodCount)
// are whole.
const MaxStatusEndpoints = 100

// PrometheusJmxExporterStatus is the observed state of a PrometheusJmxExporter.
type PrometheusJmxExporterStatus struct {
	// ObservedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions are Ready, ConfigValid, ConfigApplied and Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// MetricsEndpoints is a sample of the JVMs that have the agent loaded:
	// at most MaxStatusEndpoints entries, the first by pod name, then port,
	// so that the object stays small and the sample stable whatever the
	// number of pods. MetricsEndpointCount says how many there are in all.
	// The JVMs of one pod share its network namespace, so each has its own
	// port. An entry's containerID, pid, jvmStartedAt and injectedAt are
	// those of the last status write: a container start whose injection
	// changed nothing else does not rewrite the status (the pod's
	// jmx.handlerkit.dev/agents annotation is always current).
	// +optional
	// +listType=map
	// +listMapKey=pod
	// +listMapKey=port
	MetricsEndpoints []MetricsEndpoint `json:"metricsEndpoints,omitempty"`

	// MetricsEndpointCount counts the JVMs that have the agent loaded: all
	// of them, of which MetricsEndpoints lists a sample.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MetricsEndpointCount int32 `json:"metricsEndpointCount"`

	// PortPendingPods lists the matched pods whose agents still serve an
	// earlier spec.port: at most MaxStatusEndpoints of them, the first by
	// name; PortPendingPodCount counts them all. A loaded agent cannot move
	// to another port: the new port applies when the container next starts
	// (and is injected again).
	// +optional
	// +listType=set
	PortPendingPods []string `json:"portPendingPods,omitempty"`

	// PortPendingPodCount counts the matched pods whose agents still serve
	// an earlier spec.port, of which PortPendingPods lists a sample.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PortPendingPodCount int32 `json:"portPendingPodCount,omitempty"`

	// MatchedPods counts the pods the selector matches.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MatchedPods int32 `json:"matchedPods"`

	// InjectedPods counts the matched pods in which every selected JVM has
	// the agent loaded.
	// +optional
	// +kubebuilder:validation:Minimum=0
	InjectedPods int32 `json:"injectedPods"`

	// FailedPods counts the matched pods in which injection failed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FailedPods int32 `json:"failedPods"`

	// CircuitBreaker is set when a JVM ended during a load of the agent or
	// soon after one. While its generation and configSHA256 are the
	// exporter's current ones, the breaker is open: no other container is
	// injected. A change of the spec (metadata.generation) or of the config
	// closes it. It lives in the status so that it survives a restart of
	// the operator.
	// +optional
	CircuitBreaker *CircuitBreaker `json:"circuitBreaker,omitempty"`

	// RejectedConfig is set when a JVM's agent refused the exporter's
	// config. While its configSHA256 is the current config's, ConfigValid
	// is False and no other JVM is given that config.
	// +optional
	RejectedConfig *RejectedConfig `json:"rejectedConfig,omitempty"`

	// Proven is the latest spec and config that a JVM has run for the
	// operator's breaker window after its load. While its generation and
	// configSHA256 are the exporter's current ones, a container start is
	// injected at once, even when every JVM that proved them has since
	// restarted (a rollout, a node drain): only a change is tried on one
	// container first. It lives in the status so that it survives a restart
	// of the operator.
	// +optional
	Proven *ProvenChange `json:"proven,omitempty"`

	// AtStartCanary is the one try of a change (a generation and config not
	// yet proven) that holds pods being created back. The admission webhook
	// claims it for the first pod it gives the agent under the change; in
	// mode Both the leader claims it (attachedPod) before it attaches the
	// change to a running JVM first. While the claim is the exporter's
	// current generation and config and younger than the operator's canary
	// claim time (its breaker window plus two minutes), every other pod of
	// the exporter is created without the agent (and, in mode Both,
	// attached once the change is proven). A canary whose JVM ends within
	// the breaker window opens the circuit breaker. It lives in the status
	// so that every replica of the operator's webhook sees it.
	// +optional
	AtStartCanary *AtStartCanary `json:"atStartCanary,omitempty"`

	// RestartOnRefusal is the state of spec.injection.restartOnRefusal: the
	// eviction under way and, when set, why the operator stopped evicting.
	// It lives in the status so that an operator that restarts, or a new
	// leader, neither evicts a second pod while the first one's replacement
	// is missing nor forgets a stop.
	// +optional
	RestartOnRefusal *RestartOnRefusalStatus `json:"restartOnRefusal,omitempty"`
}

// AtStartCanary is a claim to try an exporter's unproven change on one pod
// first: by the admission webhook, on a pod at its creation, or (mode Both)
// by the operator's leader, on a running pod by live attach (AttachedPod).
// Either claim holds pods being created back.
type AtStartCanary struct {
	// Generation is the exporter's metadata.generation being tried.
	// +required
	Generation int64 `json:"generation"`

	// ConfigSHA256 is the sha256 (hex) of the config being tried.
	// +required
	// +kubebuilder:validation:MaxLength=64
	ConfigSHA256 string `json:"configSHA256"`

	// ClaimedAt is when the webhook gave the agent to the canary pod, or
	// when the leader last started or renewed its attach to AttachedPod.
	// +required
	ClaimedAt metav1.Time `json:"claimedAt"`

	// AttachedPod names the pod whose running JVM the operator's leader
	// tries the change on by live attach (mode Both); empty when the
	// webhook gave the agent to a pod at its creation. The leader renews
	// the claim while that try lasts and drops it when the try ended
	// without a JVM that runs the change.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	AttachedPod string `json:"attachedPod,omitempty"`
}

// RestartOnRefusalStatus is the state of spec.injection.restartOnRefusal.
type RestartOnRefusalStatus struct {
	// Eviction is the eviction under way: no other pod is evicted until its
	// pod is gone and its replacement (a pod of the same controller created
	// at or after it) runs, is ready and has the agent at start.
	// +optional
	Eviction *Eviction `json:"eviction,omitempty"`

	// Stopped, when set, says why the operator evicts no more of the
	// exporter's pods. It holds while its generation is the exporter's
	// metadata.generation: a change of the spec resumes evictions.
	// +optional
	Stopped *RestartOnRefusalStop `json:"stopped,omitempty"`
}

// Eviction is one pod the operator evicted (or is about to: it is written
// before the eviction is asked for).
type Eviction struct {
	// Pod is the evicted pod's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`

	// UID is the evicted pod's UID.
	// +required
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid"`

	// Controller is the pod's controller, which is expected to replace it.
	// +required
	Controller ControllerRef `json:"controller"`

	// EvictedAt is when the operator evicted the pod (its own clock,
	// truncated to the second); the replacement is a pod of the controller
	// created at or after it, other than Siblings.
	// +required
	EvictedAt metav1.Time `json:"evictedAt"`

	// Siblings are the UIDs of the controller's other pods that were
	// created at or after EvictedAt (its resolution is a second) and were
	// already there at the eviction: they are not the replacement.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=64
	Siblings []string `json:"siblings,omitempty"`

	// GoneAt is when the operator first saw the evicted pod gone; the
	// replacement must appear within --replacement-wait after it.
	// +optional
	GoneAt *metav1.Time `json:"goneAt,omitempty"`
}

// ControllerRef names a pod's controller.
type ControllerRef struct {
	// Kind is the controller's kind (ReplicaSet, StatefulSet, ...).
	// +required
	// +kubebuilder:validation:MaxLength=253
	Kind string `json:"kind"`

	// Name is the controller's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// UID is the controller's UID.
	// +required
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid"`
}

// RestartOnRefusalStop is why the operator stopped evicting an exporter's
// pods.
type RestartOnRefusalStop struct {
	// Generation is the exporter's metadata.generation the stop was set at;
	// it holds while the exporter's generation is this one.
	// +required
	Generation int64 `json:"generation"`

	// Reason is ReplacementNotInjected, ReplacementMissing or
	// ReplacementNotReady.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason"`

	// Message says which pod was evicted, its controller, its replacement if
	// any, and why the operator stopped.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`

	// Pod is the evicted pod.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod,omitempty"`

	// Replacement is the replacement pod, when one appeared.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Replacement string `json:"replacement,omitempty"`

	// StoppedAt is when the operator stopped.
	// +optional
	StoppedAt metav1.Time `json:"stoppedAt,omitempty"`
}

// ProvenChange is a spec and config that a JVM ran for the breaker window.
type ProvenChange struct {
	// Generation is the exporter's metadata.generation that was proven.
	// +required
	Generation int64 `json:"generation"`

	// ConfigSHA256 is the sha256 (hex) of the config that was proven.
	// +required
	// +kubebuilder:validation:MaxLength=64
	ConfigSHA256 string `json:"configSHA256"`

	// ProvenAt is when the operator first saw a JVM that had run them for
	// the breaker window.
	// +optional
	ProvenAt metav1.Time `json:"provenAt,omitempty"`
}

// CircuitBreaker records the JVM whose end tripped an exporter's breaker,
// and the spec and config it was loaded with.
type CircuitBreaker struct {
	// Generation is the exporter's metadata.generation the breaker tripped
	// on.
	// +required
	Generation int64 `json:"generation"`

	// ConfigSHA256 is the sha256 (hex) of the config the breaker tripped on.
	// +required
	// +kubebuilder:validation:MaxLength=64
	ConfigSHA256 string `json:"configSHA256"`

	// Pod is the pod where the JVM ran.
	// +required
	Pod string `json:"pod"`

	// Container is the container where the JVM ran.
	// +optional
	Container string `json:"container,omitempty"`

	// ContainerID is the container start whose JVM ended.
	// +optional
	ContainerID string `json:"containerID,omitempty"`

	// Message is the JVM's last word: the container's exit code, reason and
	// termination message, or what jmx-attach saw.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`

	// OpenedAt is when the operator opened the breaker.
	// +optional
	OpenedAt metav1.Time `json:"openedAt,omitempty"`
}

// RejectedConfig is a config that a JVM's agent refused.
type RejectedConfig struct {
	// ConfigSHA256 is the sha256 (hex) of the refused config.
	// +required
	// +kubebuilder:validation:MaxLength=64
	ConfigSHA256 string `json:"configSHA256"`

	// Message is the agent's (the collector's) own message.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`

	// Pod is the pod where the agent refused it.
	// +optional
	Pod string `json:"pod,omitempty"`

	// Container is the container where the agent refused it.
	// +optional
	Container string `json:"container,omitempty"`

	// RejectedAt is when the operator learned of it.
	// +optional
	RejectedAt metav1.Time `json:"rejectedAt,omitempty"`
}

// MetricsEndpoint is where one injected JVM serves its metrics.
type MetricsEndpoint struct {
	// Pod is the pod's name.
	// +required
	Pod string `json:"pod"`

	// Container is the name of the container the JVM runs in.
	// +required
	Container string `json:"container"`

	// JVM is the JVM's main class or jar, as its command line names it.
	// +optional
	JVM string `json:"jvm,omitempty"`

	// PID is the JVM's process id inside its container.
	// +optional
	PID int32 `json:"pid,omitempty"`

	// JVMStartedAt is when the JVM process started.
	// +optional
	JVMStartedAt *metav1.Time `json:"jvmStartedAt,omitempty"`

	// PodIP is the pod's IP address at injection time.
	// +optional
	PodIP string `json:"podIP,omitempty"`

	// Port is the port the agent serves /metrics on.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// ContainerID identifies the container instance (runtime://id). A new ID
	// for the same container name means the container restarted and the
	// agent must be loaded again.
	// +optional
	ContainerID string `json:"containerID,omitempty"`

	// InjectedAt is when the agent was loaded.
	// +optional
	InjectedAt metav1.Time `json:"injectedAt,omitempty"`

	// InjectedBy is how the JVM got the agent: Attach (loaded while it ran)
	// or AtStart (given at its start). Empty in records of earlier releases,
	// which means Attach.
	// +optional
	// +kubebuilder:validation:Enum=Attach;AtStart
	InjectedBy InjectedBy `json:"injectedBy,omitempty"`
}

// PrometheusJmxExporterList is a list of PrometheusJmxExporters.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type PrometheusJmxExporterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the exporters.
	Items []PrometheusJmxExporter `json:"items"`
}
