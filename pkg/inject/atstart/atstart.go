// Package atstart injects the project's JMX exporter agent into pods as they are created, so that their JVMs start
// with it: the start-time path beside live attach (issue 27, docs/atstart.md).
//
// Mutate turns a pod and an Input (which exporter, which containers, port, config, agent image, delivery) into an
// RFC 6902 JSON patch for a mutating admission webhook: a volume that holds the agent jar (an image volume, or an
// emptyDir filled by an init container), mounted read-only in each selected container, the config in the
// container's HANDLERKIT_JMX_CONFIG variable, and "-javaagent:<jar>=<port>:env:HANDLERKIT_JMX_CONFIG" appended to
// its JAVA_TOOL_OPTIONS. The pod is annotated with a Record, which the operator reads to report the pod and to
// never attach to it a second time. Handler adapts Mutate to the webhook's handler signature.
//
// Mutate never breaks a pod: whatever it cannot judge safely (a JAVA_TOOL_OPTIONS from valueFrom or possibly from
// envFrom, a pod injected before, a container that already runs an exporter) is left as it is and explained in a
// note. The agent itself never stops a JVM from starting (docs/agent.md); the one thing it cannot survive is its
// own jar missing at the path, which the volume guarantees.
package atstart

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/handlerkit/handlerkit/pkg/inject"
)

// Names shared with the operator and the webhook (contract of issue 27).
const (
	// AnnotationInjected is the pod annotation Mutate writes: a Record as JSON.
	AnnotationInjected = "jmx.handlerkit.dev/injected-at-start"
	// AnnotationNotes is the pod annotation the webhook writes when it leaves a pod it was asked to inject, or some
	// of the pod's selected containers, without the agent: why, one note per line, at most MaxNotesLen bytes.
	// The creation's warnings say the same, but only to whoever created the pod (often a controller); the
	// operator quotes this annotation in the exporter's status.
	AnnotationNotes = "jmx.handlerkit.dev/at-start-notes"
	// MaxNotesLen bounds AnnotationNotes.
	MaxNotesLen = 1024
	// LabelOptOut is the label by which a pod's or a namespace's owner opts out of the agent: with the value
	// OptOutValue on the pod or on its namespace, the webhook is not sent the pod (the webhook configuration's
	// objectSelector and namespaceSelector), and the operator never attaches to it, reconfigures it, evicts it or
	// changes its annotations (docs/operator.md).
	LabelOptOut = "jmx.handlerkit.dev/inject"
	// OptOutValue is LabelOptOut's value that opts out.
	OptOutValue = "false"
	// VolumeName is the pod volume that holds the agent jar.
	VolumeName = "handlerkit-jmx-agent"
	// MountPath is where VolumeName is mounted, read-only, in each injected container.
	MountPath = "/handlerkit/jmx-agent"
	// ConfigEnv is the container environment variable that holds the exporter config (EncodeConfig's form); the
	// agent argument names it as "env:HANDLERKIT_JMX_CONFIG" in place of a config file.
	ConfigEnv = "HANDLERKIT_JMX_CONFIG"
	// HostEnv is the container environment variable that holds the pod's IP (a downward-API fieldRef to
	// status.podIP) in a pod that uses the host's network: the agent argument names it as "[$(HANDLERKIT_JMX_HOST)]",
	// which the kubelet expands from a variable defined earlier in the list, so that the agent binds the pod's
	// IP (the node's) rather than every address of the node.
	HostEnv = "HANDLERKIT_JMX_HOST"
	// JavaToolOptions is the variable every HotSpot and OpenJ9 JVM reads its extra options from at start.
	JavaToolOptions = "JAVA_TOOL_OPTIONS"
	// InitContainerName is the name of the init container of DeliveryInitContainer.
	InitContainerName = "handlerkit-jmx-agent"
	// DefaultAgentPath is where the agent image holds the jar (the operator's DefaultAgentPath).
	DefaultAgentPath = "/opt/handlerkit/jmx-agent.jar"
	// DefaultJmxAttach is where the agent image holds jmx-attach, whose copy-agent command the init container
	// runs (the image has no shell and no cp).
	DefaultJmxAttach = "/usr/local/bin/jmx-attach"
)

// OptedOut says whether labels, a pod's or a namespace's, opt out of the agent: LabelOptOut is OptOutValue.
func OptedOut(labels map[string]string) bool { return labels[LabelOptOut] == OptOutValue }

// Delivery is how the agent jar reaches the pod.
type Delivery string

const (
	// DeliveryImageVolume mounts the agent image itself as a read-only volume (Kubernetes image volumes, GA in
	// 1.36; containerd 2.1+). No init container, nothing copied. The jar is at MountPath + the agent path.
	DeliveryImageVolume Delivery = "ImageVolume"
	// DeliveryInitContainer copies the jar into an emptyDir from an init container running the agent image, for
	// clusters without image volumes. The jar is at MountPath/<base name of the agent path>.
	DeliveryInitContainer Delivery = "InitContainer"
)

// Input says what to inject into a pod. Only Exporter, Port, Config and Image are required.
type Input struct {
	// Exporter is the PrometheusJmxExporter's name, recorded in the annotation.
	Exporter string
	// Containers are the names of the containers to inject; empty means every container of spec.containers.
	// Init containers (native sidecars included) are never injected.
	Containers []string
	// Port is the agent's port in the first injected container; each further one gets the next port that no
	// container of the pod declares and no earlier injected container took (the pod shares one network).
	Port int32
	// Config is the exporter config (jmx_exporter YAML). It travels in ConfigEnv, encoded as inject.EncodeConfig
	// does, and is refused above its limits.
	Config []byte
	// Image is the agent image (holds the jar at AgentPath and, for DeliveryInitContainer, jmx-attach).
	Image string
	// PullPolicy is the image's pull policy; empty leaves the Kubernetes default.
	PullPolicy corev1.PullPolicy
	// Delivery is how the jar reaches the pod. Default: DeliveryImageVolume.
	Delivery Delivery
	// AgentPath is the jar's absolute path inside Image. Default: DefaultAgentPath.
	AgentPath string
	// CopyCommand is the init container's command for DeliveryInitContainer; it must leave the jar at
	// MountPath/<base name of AgentPath>. Default: DefaultCopyCommand(AgentPath).
	CopyCommand []string
	// Generation is the exporter's metadata.generation, recorded in the annotation (0: not recorded).
	Generation int64
	// Canary is true when this pod tries a change of the exporter (a generation and config that no JVM has run
	// long enough yet) alone; recorded in the annotation.
	Canary bool
	// Claim, when set, is called by Handler once Mutate has chosen containers to inject, and not for a dry run:
	// the operator claims there the pod's try of the change (Canary). An error leaves the pod unchanged, with the
	// error as a note. Mutate itself never calls it.
	Claim func(ctx context.Context) error
	// ImageEnv is what each container's image sets for its JVM, by container name, as the webhook read it
	// (pkg/inject/imageenv). A container it names keeps its image's JAVA_TOOL_OPTIONS before the agent's
	// option, and is left alone when its image already loads jmx_exporter; a container it does not name is
	// injected as if its image set nothing.
	ImageEnv map[string]ImageEnv
	// Unreadable is what to do with a container whose ImageEnv says its image's config could not be read.
	// Default: UnreadableInject.
	Unreadable UnreadableImage
	// InitResources are the init container's requests and limits for DeliveryInitContainer (FitLimitRanges
	// sizes them to a namespace's LimitRanges). Default: DefaultInitResources().
	InitResources *corev1.ResourceRequirements
	// Notes are the caller's notes on the pod (why it chose this Delivery), written first with Mutate's own in
	// AnnotationNotes and Result.Notes.
	Notes []string
}

// DefaultCopyCommand is the init container's command: jmx-attach copy-agent, which copies and checks the jar with
// no shell (the agent image has none).
func DefaultCopyCommand(agentPath string) []string {
	return []string{DefaultJmxAttach, "copy-agent", "--from", agentPath, "--to", MountPath}
}

// Record is the value of AnnotationInjected, as JSON: what the pod was given at creation.
type Record struct {
	// Exporter is the PrometheusJmxExporter's name.
	Exporter string `json:"exporter"`
	// Containers are the injected containers, in the pod's order.
	Containers []string `json:"containers"`
	// Port is the exporter's port (Input.Port).
	Port int32 `json:"port"`
	// Ports is each injected container's port (the first is Port; the next ones above it).
	Ports map[string]int32 `json:"ports,omitempty"`
	// ConfigHash is the first 16 hex digits of the config's SHA-256, as the operator's status names configs.
	ConfigHash string `json:"configHash"`
	// Delivery is how the jar reached the pod.
	Delivery Delivery `json:"delivery"`
	// Generation is the exporter's metadata.generation the pod was injected under (absent in annotations of
	// earlier releases).
	Generation int64 `json:"generation,omitempty"`
	// Canary is true when the pod was the one that tried a change of the exporter alone (Input.Canary).
	Canary bool `json:"canary,omitempty"`
}

// ParseRecord returns the Record a pod was annotated with, and false when it carries none.
func ParseRecord(pod *corev1.Pod) (Record, bool, error) {
	v, ok := pod.GetAnnotations()[AnnotationInjected]
	if !ok {
		return Record{}, false, nil
	}
	var r Record
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return Record{}, true, fmt.Errorf("atstart: annotation %s: %w", AnnotationInjected, err)
	}
	return r, true, nil
}

// ConfigHash returns the first 16 hex digits of the SHA-256 of config, the operator's short name for a config.
// It is the one definition of that name: the operator names configs with it and ShortHash.
func ConfigHash(config []byte) string {
	sum := sha256.Sum256(config)
	return ShortHash(hex.EncodeToString(sum[:]))
}

// ShortHash is the short name (ConfigHash) of the config whose SHA-256 in hex is sha, or "" when sha is shorter
// than 16 digits.
func ShortHash(sha string) string {
	if len(sha) < 16 {
		return ""
	}
	return sha[:16]
}

// Op is one RFC 6902 operation. Mutate writes only "add", which replaces a member that exists and creates one
// that does not.
type Op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// Injected is a container Mutate gives the agent.
type Injected struct {
	// Container is the container's name.
	Container string
	// Port is the agent's port in it.
	Port int32
}

// Result is what Mutate decided.
type Result struct {
	// Patch is the JSON patch for the admission response: empty when the pod is left as it is, and only
	// AnnotationNotes when the pod was to be injected and is left without the agent.
	Patch []Op
	// Injected are the containers the patch injects, in the pod's order.
	Injected []Injected
	// Notes say, for a person, what was left alone and why, and anything surprising about what was done.
	Notes []string
}

// PatchJSON returns Patch as the bytes of an admission response's patch, or nil when it is empty.
func (r Result) PatchJSON() ([]byte, error) {
	if len(r.Patch) == 0 {
		return nil, nil
	}
	return json.Marshal(r.Patch)
}

// DefaultInitResources are the init container's requests and limits unless Input.InitResources says otherwise.
func DefaultInitResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: initRequests.DeepCopy(), Limits: initLimits.DeepCopy()}
}

// Resources of the init container: it copies a 3 MB file once.
var (
	initRequests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}
	initLimits   = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	// emptyDirLimit bounds the emptyDir the init container fills (the jar is about 3 MB).
	emptyDirLimit = resource.MustParse("64Mi")
)

// checked is an Input with its defaults filled in and its config encoded.
type checked struct {
	Input
	configEnv string
	jar       string // the -javaagent path inside the injected containers
}

func check(in Input) (checked, error) {
	c := checked{Input: in}
	var problems []string
	if in.Exporter == "" {
		problems = append(problems, "the exporter's name is empty")
	}
	if in.Port < 1 || in.Port > 65535 {
		problems = append(problems, fmt.Sprintf("port %d is not between 1 and 65535", in.Port))
	}
	if in.Image == "" {
		problems = append(problems, "the agent image is empty")
	}
	switch in.PullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		problems = append(problems, fmt.Sprintf("pull policy %q is not Always, IfNotPresent or Never", in.PullPolicy))
	}
	if c.Delivery == "" {
		c.Delivery = DeliveryImageVolume
	}
	if c.AgentPath == "" {
		c.AgentPath = DefaultAgentPath
	}
	// The path goes into "-javaagent:<path>=<args>" inside JAVA_TOOL_OPTIONS, which the JVM splits on white
	// space, and ends at the first "=".
	if !path.IsAbs(c.AgentPath) || path.Clean(c.AgentPath) != c.AgentPath || c.AgentPath == "/" ||
		strings.ContainsAny(c.AgentPath, " \t\r\n=\"'\\$") {
		problems = append(problems, fmt.Sprintf("agent path %q is not a clean absolute path without white space, quotes, '=' or '$'", c.AgentPath))
	}
	switch c.Delivery {
	case DeliveryImageVolume:
		c.jar = MountPath + c.AgentPath
	case DeliveryInitContainer:
		c.jar = MountPath + "/" + path.Base(c.AgentPath)
		if len(c.CopyCommand) == 0 {
			c.CopyCommand = DefaultCopyCommand(c.AgentPath)
		}
	default:
		problems = append(problems, fmt.Sprintf("delivery %q is not %s or %s", c.Delivery, DeliveryImageVolume, DeliveryInitContainer))
	}
	switch c.Unreadable {
	case "", UnreadableInject, UnreadableSkip:
	default:
		problems = append(problems, fmt.Sprintf("unreadable-image policy %q is not %s or %s", c.Unreadable, UnreadableInject, UnreadableSkip))
	}
	if len(problems) > 0 {
		return c, errors.New("atstart: " + strings.Join(problems, "; "))
	}
	v, err := inject.EncodeConfig(in.Config)
	if err != nil {
		return c, fmt.Errorf("atstart: %w", err)
	}
	c.configEnv = v
	return c, nil
}

// Mutate returns the patch that gives pod the agent at its JVMs' start, as a mutating admission webhook answers
// a pod's creation. An error means the Input is unusable (the operator's mistake, not the pod's): the pod must
// then be admitted unchanged. Whatever makes a container or the pod unsafe to inject leaves it unchanged, with a
// note: the patch is then empty when no container is left.
//
// A container is injected when none of these holds: its JAVA_TOOL_OPTIONS comes from valueFrom (left to its
// owner); it has no JAVA_TOOL_OPTIONS in env but an envFrom source that may define one (an env entry would
// override that value: Kubernetes gives env precedence over envFrom); it already defines ConfigEnv, mounts
// something at MountPath, or names a jmx_exporter -javaagent (a second exporter in one JVM), or its image does
// (Input.ImageEnv; an image's JAVA_TOOL_OPTIONS is otherwise kept before the agent's option). The pod is left as
// it is when it carries AnnotationInjected, VolumeName or an agent option of ours already (a reinvocation, or a
// pod submitted again), or can only run on a node that is not Linux (spec.os, a nodeSelector on kubernetes.io/os,
// or a required node affinity each of whose terms excludes linux by that label). Input.Notes come first in the
// notes of a pod that is not left as it is.
func Mutate(pod *corev1.Pod, in Input) (Result, error) {
	if pod == nil {
		return Result{}, errors.New("atstart: no pod")
	}
	c, err := check(in)
	if err != nil {
		return Result{}, err
	}
	var res Result
	note := func(format string, args ...any) { res.Notes = append(res.Notes, fmt.Sprintf(format, args...)) }

	if why := injectedBefore(pod); why != "" {
		note("already injected at start (%s); left as it is", why)
		return res, nil
	}
	res.Notes = append(res.Notes, in.Notes...)
	if why := c.podLeftAlone(pod); why != "" {
		note("%s", why)
		res.Patch = NotesPatch(pod, res.Notes)
		return res, nil
	}
	targets := c.targets(pod, note)
	if len(targets) == 0 {
		if len(res.Notes) == 0 {
			note("no container of the pod is selected by exporter %s", c.Exporter)
		}
		res.Patch = NotesPatch(pod, res.Notes)
		return res, nil
	}
	if pod.Spec.HostNetwork {
		note("the pod uses the host's network: its agents bind the pod's IP (the node's, from %s) rather than every "+
			"address of the node; their ports are the node's, and another pod on the node may hold them", HostEnv)
	}
	for _, t := range targets {
		res.Injected = append(res.Injected, Injected{Container: pod.Spec.Containers[t.index].Name, Port: t.port})
	}
	if res.Patch, err = c.patch(pod, targets, c.record(res.Injected), res.Notes); err != nil {
		return Result{}, err
	}
	return res, nil
}

// podLeftAlone says why the whole pod is left without the agent, or "": it can only run on a node that is not
// Linux, or it already has an init container of ours.
func (c checked) podLeftAlone(pod *corev1.Pod) string {
	if why := notLinux(pod); why != "" {
		return fmt.Sprintf("the pod runs on Windows, or another system than Linux (%s); the agent is injected into Linux pods only", why)
	}
	if c.Delivery == DeliveryInitContainer {
		for _, ic := range pod.Spec.InitContainers {
			if ic.Name == InitContainerName {
				return fmt.Sprintf("the pod already has an init container named %s; left as it is", InitContainerName)
			}
		}
	}
	return ""
}

// target is a container that gets the agent: its index in the pod's containers, and the agent's port.
type target struct {
	index int
	port  int32
}

// targets picks the containers that get the agent, and a free port for each: the first port from c.Port up that
// no container of the pod declares. Each container left alone gets a note saying why.
func (c checked) targets(pod *corev1.Pod, note func(format string, args ...any)) []target {
	selected := map[string]bool{}
	for _, name := range c.Containers {
		selected[name] = true
		if !slices.ContainsFunc(pod.Spec.Containers, func(ct corev1.Container) bool { return ct.Name == name }) {
			note("container %s, selected by exporter %s, is not in the pod", name, c.Exporter)
		}
	}
	used := declaredPorts(pod)
	var targets []target
	for i := range pod.Spec.Containers {
		ct := &pod.Spec.Containers[i]
		if len(c.Containers) > 0 && !selected[ct.Name] {
			continue
		}
		if why := unsafeContainer(ct); why != "" {
			note("container %s %s; left alone, not injected", ct.Name, why)
			continue
		}
		if why, n := c.imageVerdict(ct); why != "" {
			note("container %s %s; left alone, not injected", ct.Name, why)
			continue
		} else if n != "" {
			note("%s", n)
		}
		p := c.Port
		for used[p] != "" && p < 65535 {
			p++
		}
		if used[p] != "" {
			note("container %s: no free port from %d up; left alone, not injected", ct.Name, c.Port)
			continue
		}
		if p != c.Port && len(targets) == 0 {
			if by := used[c.Port]; by != "" {
				note("container %s: port %d is declared by %s, so its agent serves on %d", ct.Name, c.Port, by, p)
			}
		}
		used[p] = "agent"
		targets = append(targets, target{index: i, port: p})
	}
	return targets
}

// record is the AnnotationInjected record of a pod whose containers injected get the agent.
func (c checked) record(injected []Injected) Record {
	rec := Record{Exporter: c.Exporter, Port: c.Port, Ports: map[string]int32{}, ConfigHash: ConfigHash(c.Config), Delivery: c.Delivery,
		Generation: c.Generation, Canary: c.Canary}
	for _, in := range injected {
		rec.Containers = append(rec.Containers, in.Container)
		rec.Ports[in.Container] = in.Port
	}
	return rec
}

// injectedBefore says why pod was injected before, or "".
func injectedBefore(pod *corev1.Pod) string {
	if _, ok := pod.Annotations[AnnotationInjected]; ok {
		return "annotation " + AnnotationInjected
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == VolumeName {
			return "volume " + VolumeName
		}
	}
	for _, ct := range pod.Spec.Containers {
		for _, e := range ct.Env {
			if e.Name == JavaToolOptions && strings.Contains(e.Value, "-javaagent:"+MountPath+"/") {
				return "container " + ct.Name + "'s " + JavaToolOptions + " loads an agent from " + MountPath
			}
		}
	}
	return ""
}

// osLabel is the node label that names a node's operating system.
const osLabel = "kubernetes.io/os"

// notLinux says why pod can only run on a node that is not Linux, or "": spec.os, a nodeSelector on osLabel
// other than linux, or a required node affinity each of whose terms excludes linux by osLabel.
func notLinux(pod *corev1.Pod) string {
	if pod.Spec.OS != nil && pod.Spec.OS.Name != corev1.Linux {
		return "spec.os.name " + string(pod.Spec.OS.Name)
	}
	if v, ok := pod.Spec.NodeSelector[osLabel]; ok && v != string(corev1.Linux) {
		return "nodeSelector " + osLabel + "=" + v
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return ""
	}
	for _, t := range terms {
		// The terms are ORed; a term's expressions are ANDed: the term excludes Linux when one of them does.
		if !slices.ContainsFunc(t.MatchExpressions, excludesLinux) {
			return ""
		}
	}
	return "its required node affinity matches no Linux node (" + osLabel + ")"
}

// excludesLinux says whether a node selector requirement rules out every Linux node.
func excludesLinux(r corev1.NodeSelectorRequirement) bool {
	if r.Key != osLabel {
		return false
	}
	linux := slices.Contains(r.Values, string(corev1.Linux))
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return !linux
	case corev1.NodeSelectorOpNotIn:
		return linux
	case corev1.NodeSelectorOpDoesNotExist:
		return true
	}
	return false
}

// unsafeContainer says why injecting ct could surprise its owner or clash with what it runs, or "".
func unsafeContainer(ct *corev1.Container) string {
	if i := lastEnv(ct.Env, JavaToolOptions); i >= 0 {
		if ct.Env[i].ValueFrom != nil {
			return "sets " + JavaToolOptions + " from valueFrom"
		}
	} else {
		for _, src := range ct.EnvFrom {
			// An envFrom source defines JAVA_TOOL_OPTIONS only through a prefix that begins that name (or none).
			if !strings.HasPrefix(JavaToolOptions, src.Prefix) {
				continue
			}
			what := "an envFrom source"
			switch {
			case src.ConfigMapRef != nil:
				what = "envFrom ConfigMap " + src.ConfigMapRef.Name
			case src.SecretRef != nil:
				what = "envFrom Secret " + src.SecretRef.Name
			}
			return "takes variables from " + what + ", which may set " + JavaToolOptions + " (the webhook cannot see it, " +
				"and an env entry would replace it); set " + JavaToolOptions + " in env, even empty, to have it injected"
		}
	}
	if lastEnv(ct.Env, ConfigEnv) >= 0 {
		return "already defines " + ConfigEnv
	}
	if lastEnv(ct.Env, HostEnv) >= 0 {
		return "already defines " + HostEnv
	}
	for _, m := range ct.VolumeMounts {
		if m.Name == VolumeName || path.Clean(m.MountPath) == MountPath {
			return "already mounts a volume at " + MountPath
		}
	}
	for _, name := range []string{JavaToolOptions, "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"} {
		if i := lastEnv(ct.Env, name); i >= 0 && strings.Contains(ct.Env[i].Value, "jmx_prometheus") {
			return "already loads jmx_exporter (" + name + ")"
		}
	}
	for _, a := range append(slices.Clone(ct.Command), ct.Args...) {
		if strings.HasPrefix(a, "-javaagent:") && strings.Contains(a, "jmx_prometheus") {
			return "already loads jmx_exporter (" + a + ")"
		}
	}
	return ""
}

// lastEnv returns the index of the last env entry named name (the one Kubernetes applies), or -1.
func lastEnv(env []corev1.EnvVar, name string) int {
	for i := len(env) - 1; i >= 0; i-- {
		if env[i].Name == name {
			return i
		}
	}
	return -1
}

// declaredPorts returns the TCP ports the pod's containers declare, each with who declares it.
func declaredPorts(pod *corev1.Pod) map[int32]string {
	used := map[int32]string{}
	all := append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...)
	for _, ct := range all {
		for _, p := range ct.Ports {
			if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
				used[p.ContainerPort] = "container " + ct.Name
			}
		}
	}
	return used
}
