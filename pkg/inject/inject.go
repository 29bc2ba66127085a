// Package inject loads the Prometheus JMX exporter java agent into the JVMs
// of one running container, through the Kubernetes API, by running the
// jmx-attach helper next to them. It is the operator's "action" for agents:
// package operator decides what to inject, this package does it.
//
// Two strategies implement Strategy:
//
//   - EphemeralContainer adds an ephemeral container from the agent image that
//     targets the JVM's container (it shares its PID namespace) and runs
//     `jmx-attach inject`, with the exporter config in its environment,
//     gzipped (EncodeConfig). The result comes back as the container's
//     termination message. Nothing is needed in the target image. A pod gets
//     at most a budget of such containers in its whole life.
//   - Exec execs into the JVM's container with a fixed command and streams
//     jmx-attach, the agent jar and the config in as stdin. It needs /bin/sh,
//     mktemp, cat and chmod in the target image and a writable /tmp. No user
//     data is ever interpolated into a shell string: the commands are
//     constants and every value travels as an argument or on stdin.
//
// Both are safe to call again for a container that already has the agent:
// jmx-attach keeps a marker per JVM and a lock around each load, so a JVM
// gets the agent at most once, whichever operator replica or process asks.
package inject

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/handlerkit/handlerkit/pkg/jvm"
)

// ConfigEnv is the environment variable of the ephemeral container that holds
// the exporter's YAML config (an ephemeral container cannot mount a volume),
// encoded by EncodeConfig.
const ConfigEnv = "HANDLERKIT_JMX_CONFIG"

// Exit codes of jmx-attach that the strategies interpret.
const (
	exitSomeFailed  = 1
	exitUsage       = 2
	exitNoJVM       = 3
	exitInvalidArgs = 4
	exitNoContainer = 6
)

// ErrContainerNotFound is returned (wrapped) when jmx-attach could not
// identify one process of the target container (reason container-not-found):
// it touched nothing, and never looks at other processes instead.
var ErrContainerNotFound = errors.New("container-not-found: no process of the target container could be identified")

// Target is one container of a running pod.
type Target struct {
	// Pod is the pod as last seen; Namespace, Name and UID are used.
	Pod *corev1.Pod
	// Container is the container's name.
	Container string
	// ContainerID is the container instance (runtime://id) to inject. An
	// injection never touches another instance of the container.
	ContainerID string
	// UID and GID are the user the container's processes run as, when known
	// (the container status or the security context says). The
	// EphemeralContainer strategy runs jmx-attach as that user with every
	// capability dropped.
	UID, GID *int64
	// Capabilities are the capabilities the container's processes hold (its
	// runtime's default set, changed by its securityContext). When the JVM
	// runs as root, the kernel lets another process read its /proc entries
	// only if that process holds every capability the JVM holds, so a root
	// helper gets exactly these.
	Capabilities []corev1.Capability
}

// DefaultCapabilities is the capability set container runtimes (containerd,
// CRI-O, Docker) give a container that does not change it.
var DefaultCapabilities = []corev1.Capability{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
	"MKNOD", "NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}

// ContainerCapabilities is the capability set of a container with the given
// security context: DefaultCapabilities without the dropped ones ("ALL"
// drops every one), plus the added ones.
func ContainerCapabilities(sc *corev1.SecurityContext) []corev1.Capability {
	if sc != nil && sc.Privileged != nil && *sc.Privileged {
		return []corev1.Capability{"ALL"}
	}
	set := map[corev1.Capability]bool{}
	for _, c := range DefaultCapabilities {
		set[c] = true
	}
	if sc != nil && sc.Capabilities != nil {
		for _, d := range sc.Capabilities.Drop {
			if strings.EqualFold(string(d), "ALL") {
				set = map[corev1.Capability]bool{}
				break
			}
			delete(set, corev1.Capability(strings.TrimPrefix(strings.ToUpper(string(d)), "CAP_")))
		}
		for _, a := range sc.Capabilities.Add {
			set[corev1.Capability(strings.TrimPrefix(strings.ToUpper(string(a)), "CAP_"))] = true
		}
	}
	out := make([]corev1.Capability, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// String names the target for logs and errors.
func (t Target) String() string {
	if t.Pod == nil {
		return t.Container
	}
	return t.Pod.Namespace + "/" + t.Pod.Name + "/" + t.Container
}

// Request says what to load.
type Request struct {
	// Port is the port of the first (oldest) JVM in the container; later JVMs
	// get the next free ports (jmx-attach assigns them).
	Port int32
	// Config is the exporter's YAML config, validated by the caller.
	Config []byte
	// JVMs restricts injection to JVMs whose main class or jar matches one of
	// these patterns; empty means every JVM.
	JVMs []string
	// Wait is how long jmx-attach waits for a JVM to appear in the container
	// and to become safe to attach to (its SIGQUIT handler installed).
	Wait time.Duration
	// Image, AgentPath and AttachHelperPath locate the agent jar and
	// jmx-attach in the agent image (EphemeralContainer strategy only).
	Image, AgentPath, AttachHelperPath string
	// PullPolicy is the ephemeral container's image pull policy.
	PullPolicy corev1.PullPolicy
	// KeepBudget, when positive, is how many ephemeral containers of the
	// pod's budget the EphemeralContainer strategy leaves unused: it adds
	// none when fewer would be left, and answers Outcome.Refused
	// ReasonBudgetKept. The operator sets it for a second look for a JVM
	// that started late, so that such looks never take the container
	// that a restarted JVM needs.
	KeepBudget int
}

// Outcome is what one run of jmx-attach reported.
type Outcome struct {
	// Results has one entry per JVM.
	Results []jvm.InjectResult
	// NoJVM is true when no (matching) JVM runs in the container.
	NoJVM bool
	// Detail is jmx-attach's own message when it reported no results (bad
	// arguments, an invalid config or jar); it is empty otherwise.
	Detail string
	// Refused, when set, is a CamelCase reason why nothing ran in the
	// container: ReasonShellNotFound (Exec in an image without a shell),
	// ReasonPatchRefused (the API server refused the ephemeral container or
	// the exec), ReasonBudgetExhausted (the pod has its budget of ephemeral
	// containers), ReasonBudgetKept (Request.KeepBudget) or
	// ReasonConfigTooLarge. Detail says what to do. Asking
	// again without a change gets the same answer.
	Refused string
}

// ReasonShellNotFound is Outcome.Refused when the Exec strategy finds no
// /bin/sh (or mktemp, cat, chmod) in the target container.
const ReasonShellNotFound = "ShellNotFound"

// Strategy loads or reconfigures agents in one container.
type Strategy interface {
	// Name is the spec value (Exec, EphemeralContainer).
	Name() string
	// Inject runs `jmx-attach inject` for the target. An error means the
	// outcome is unknown (an API error, a timeout): retry later. Per-JVM
	// failures are in the Outcome.
	Inject(ctx context.Context, t Target, r Request) (Outcome, error)
	// Reconfigure runs `jmx-attach reconfigure`: the new config replaces the
	// file the running agents read, which they reload on their next scrape.
	Reconfigure(ctx context.Context, t Target, r Request) (Outcome, error)
}

// AgentHost is the address the agent binds in pod: "" (every address of
// the pod's own network namespace) for a pod with its own network, and the
// pod's IP for a pod that uses the host's network, whose namespace is the
// node's: an agent that bound every address there would serve the node's
// loopback and every interface of the node. For such a pod the kubelet
// reports the node's IP as the pod's, which is also what Prometheus scrapes.
// A hostNetwork pod without an IP yet is an error: the caller retries later
// rather than bind every address.
func AgentHost(pod *corev1.Pod) (string, error) {
	if pod == nil || !pod.Spec.HostNetwork {
		return "", nil
	}
	ip := net.ParseIP(pod.Status.PodIP)
	if ip == nil {
		return "", fmt.Errorf("pod %s/%s uses the host's network and has no IP yet (status.podIP %q): its agent binds the pod's IP, not every address of the node",
			pod.Namespace, pod.Name, pod.Status.PodIP)
	}
	return ip.String(), nil
}

// injectArgs are jmx-attach's arguments after the command name, except where
// the agent and config come from. --container-id limits jmx-attach to the
// target container's processes, whatever else shares its PID namespace.
// --host binds a hostNetwork pod's agent to the pod's IP (AgentHost; the
// strategies check its error first).
func injectArgs(t Target, r Request, termLog bool) []string {
	args := []string{"--all", "--port", strconv.Itoa(int(r.Port)), "--json", "--min-age", "0",
		"--wait", r.Wait.String(), "--container-id", t.ContainerID}
	if host, err := AgentHost(t.Pod); err == nil && host != "" {
		args = append(args, "--host", host)
	}
	for _, p := range r.JVMs {
		args = append(args, "--jvm", p)
	}
	if termLog {
		args = append(args, "--termination-log", "/dev/termination-log")
	}
	return args
}

// reconfigureArgs are the arguments of `jmx-attach reconfigure`.
func reconfigureArgs(t Target, r Request, termLog bool) []string {
	args := []string{"--all", "--json", "--container-id", t.ContainerID}
	for _, p := range r.JVMs {
		args = append(args, "--jvm", p)
	}
	if termLog {
		args = append(args, "--termination-log", "/dev/termination-log")
	}
	return args
}

// parseOutcome reads jmx-attach's result lines (stdout with --json, or the
// termination log) and its exit code.
func parseOutcome(out []byte, exitCode int) (Outcome, error) {
	var o Outcome
	var other []string
	for _, line := range bytes.Split(out, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if line[0] == '{' {
			r, err := jvm.ParseInjectResult(line)
			if err == nil {
				o.Results = append(o.Results, r)
				continue
			}
		}
		other = append(other, string(line))
	}
	o.Detail = truncate(strings.Join(other, "; "), 512)
	switch {
	case exitCode == exitNoContainer:
		return o, fmt.Errorf("%w: %s", ErrContainerNotFound, o.Detail)
	case exitCode == exitNoJVM:
		o.NoJVM = true
		return o, nil
	case len(o.Results) > 0:
		return o, nil
	case exitCode == 0:
		return o, errors.New("jmx-attach succeeded but reported no result")
	case exitCode == exitUsage || exitCode == exitInvalidArgs:
		// Refused before any JVM was touched: the request itself is wrong.
		return o, nil
	default:
		return o, fmt.Errorf("jmx-attach exited with status %d and no result: %s", exitCode, o.Detail)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
