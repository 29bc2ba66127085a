package atstart

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// AgentOption returns the option Mutate appends to JAVA_TOOL_OPTIONS for an agent jar at jar serving port on
// every address of the pod's own network namespace.
func AgentOption(jar string, port int32) string {
	return "-javaagent:" + jar + "=" + strconv.Itoa(int(port)) + ":env:" + ConfigEnv
}

// HostNetworkAgentOption is AgentOption for a pod that uses the host's network: the agent binds the address in
// HostEnv, in brackets so that an IPv6 address parses too (the agent's argument takes "[host]:port:config").
func HostNetworkAgentOption(jar string, port int32) string {
	return "-javaagent:" + jar + "=[$(" + HostEnv + ")]:" + strconv.Itoa(int(port)) + ":env:" + ConfigEnv
}

// hostEnvVar is the HostEnv variable: the pod's IP from the downward API.
func hostEnvVar() corev1.EnvVar {
	return corev1.EnvVar{Name: HostEnv, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}}
}

// patchOps is a JSON patch under construction.
type patchOps []Op

// add appends an "add" of v at path p.
func (ops *patchOps) add(p string, v any) { *ops = append(*ops, Op{Op: "add", Path: p, Value: v}) }

// patch is the JSON patch that gives the targets of pod the agent: the pod's annotations (rec and the notes), the
// agent's volume, the init container that copies the jar (with DeliveryInitContainer), and each target's mount
// and environment. A list or map that is empty may be absent from the pod's JSON (omitempty): it is added whole,
// never appended to.
func (c checked) patch(pod *corev1.Pod, targets []target, rec Record, notes []string) ([]Op, error) {
	recJSON, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("atstart: %w", err)
	}
	annotations := map[string]string{AnnotationInjected: string(recJSON)}
	if len(notes) > 0 {
		annotations[AnnotationNotes] = notesValue(notes)
	}
	ops := patchOps(annotationOps(pod, annotations))
	vol := volume(c)
	if len(pod.Spec.Volumes) == 0 {
		ops.add("/spec/volumes", []corev1.Volume{vol})
	} else {
		ops.add("/spec/volumes/-", vol)
	}
	if c.Delivery == DeliveryInitContainer {
		ic := initContainer(c, pod)
		if len(pod.Spec.InitContainers) == 0 {
			ops.add("/spec/initContainers", []corev1.Container{ic})
		} else {
			// First, so that the jar is in place before any other init container, native sidecars included.
			ops.add("/spec/initContainers/0", ic)
		}
	}
	for _, t := range targets {
		c.containerOps(&ops, pod, t)
	}
	return ops, nil
}

// containerOps adds to ops what gives target t of pod the agent: the volume's mount, the agent's option in
// JAVA_TOOL_OPTIONS (after the user's or the image's own options), ConfigEnv, and HostEnv with the host's network.
func (c checked) containerOps(ops *patchOps, pod *corev1.Pod, t target) {
	ct := &pod.Spec.Containers[t.index]
	base := "/spec/containers/" + strconv.Itoa(t.index)
	mount := corev1.VolumeMount{Name: VolumeName, MountPath: MountPath, ReadOnly: true}
	if len(ct.VolumeMounts) == 0 {
		ops.add(base+"/volumeMounts", []corev1.VolumeMount{mount})
	} else {
		ops.add(base+"/volumeMounts/-", mount)
	}
	opt := AgentOption(c.jar, t.port)
	if pod.Spec.HostNetwork {
		opt = HostNetworkAgentOption(c.jar, t.port)
	}
	var env []corev1.EnvVar
	if i := lastEnv(ct.Env, JavaToolOptions); i >= 0 {
		// The user's options first: both apply, and for a flag given twice the JVM takes the last, so the
		// agent's option never overrides one of theirs.
		v := strings.TrimRight(ct.Env[i].Value, " \t\r\n")
		if v != "" {
			v += " "
		}
		ops.add(base+"/env/"+strconv.Itoa(i)+"/value", v+opt)
		if pod.Spec.HostNetwork {
			// Before JAVA_TOOL_OPTIONS: the kubelet expands $(VAR) only from variables defined earlier.
			ops.add(base+"/env/"+strconv.Itoa(i), hostEnvVar())
		}
	} else {
		if pod.Spec.HostNetwork {
			env = append(env, hostEnvVar())
		}
		// The image's own options, if any, first, as for the user's.
		env = append(env, corev1.EnvVar{Name: JavaToolOptions, Value: c.imageOptions(ct.Name) + opt})
	}
	env = append(env, corev1.EnvVar{Name: ConfigEnv, Value: c.configEnv})
	if len(ct.Env) == 0 {
		ops.add(base+"/env", env)
	} else {
		for _, e := range env {
			ops.add(base+"/env/-", e)
		}
	}
}

// NotesPatch is the patch that only annotates pod with notes (AnnotationNotes): for a pod the webhook leaves
// without the agent. Nil without notes.
func NotesPatch(pod *corev1.Pod, notes []string) []Op {
	if len(notes) == 0 {
		return nil
	}
	return annotationOps(pod, map[string]string{AnnotationNotes: notesValue(notes)})
}

// notesValue is AnnotationNotes' value: the notes, one per line, cut at MaxNotesLen.
func notesValue(notes []string) string {
	v := strings.Join(notes, "\n")
	if len(v) > MaxNotesLen {
		v = strings.ToValidUTF8(v[:MaxNotesLen-3], "") + "..."
	}
	return v
}

// annotationOps adds annotations to pod, in the order of their keys: the whole map when the pod has none.
func annotationOps(pod *corev1.Pod, annotations map[string]string) []Op {
	if len(pod.Annotations) == 0 {
		return []Op{{Op: "add", Path: "/metadata/annotations", Value: annotations}}
	}
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var ops []Op
	for _, k := range keys {
		ops = append(ops, Op{Op: "add", Path: "/metadata/annotations/" + escape(k), Value: annotations[k]})
	}
	return ops
}

func volume(c checked) corev1.Volume {
	v := corev1.Volume{Name: VolumeName}
	if c.Delivery == DeliveryImageVolume {
		v.Image = &corev1.ImageVolumeSource{Reference: c.Image, PullPolicy: c.PullPolicy}
	} else {
		limit := emptyDirLimit
		v.EmptyDir = &corev1.EmptyDirVolumeSource{SizeLimit: &limit}
	}
	return v
}

// initContainer is the copying init container: small, read-only root, no privilege, and non-root unless the pod
// itself runs as root (a container-level runAsNonRoot would then stop the pod from starting).
func initContainer(c checked, pod *corev1.Pod) corev1.Container {
	no, yes := false, true
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: &no,
		ReadOnlyRootFilesystem:   &yes,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if psc := pod.Spec.SecurityContext; psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 0 {
		sc.RunAsNonRoot = &yes
	}
	return corev1.Container{
		Name:            InitContainerName,
		Image:           c.Image,
		ImagePullPolicy: c.PullPolicy,
		Command:         slices.Clone(c.CopyCommand),
		VolumeMounts:    []corev1.VolumeMount{{Name: VolumeName, MountPath: MountPath}},
		Resources:       initResources(c.Input),
		SecurityContext: sc,
		// The message of a failed copy is what `kubectl describe pod` shows.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// initResources are the init container's requests and limits.
func initResources(in Input) corev1.ResourceRequirements {
	if in.InitResources != nil {
		return *in.InitResources.DeepCopy()
	}
	return DefaultInitResources()
}

// escape escapes a JSON pointer reference token (RFC 6901).
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
