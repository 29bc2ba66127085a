package inject

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
)

// DefaultMaxAttempts bounds the ephemeral containers one container start can
// get for one purpose. Ephemeral containers cannot be removed from a pod, so
// retries of transient failures must not pile up without end.
const DefaultMaxAttempts = 5

// DefaultBudget is how many ephemeral containers of the operator (named
// ContainerNamePrefix...) one pod may collect in its whole life, injections
// and reconfigurations together, whatever its containers' restarts.
const DefaultBudget = 5

// ContainerNamePrefix starts the name of every ephemeral container the
// operator adds.
const ContainerNamePrefix = "jmx-"

// Reasons of Outcome.Refused besides ReasonShellNotFound.
const (
	// ReasonPatchRefused: the API server refused the ephemeral container or
	// the exec (Pod Security, an admission webhook, RBAC, validation).
	ReasonPatchRefused = "PatchRefused"
	// ReasonBudgetExhausted: the pod has its budget of ephemeral containers.
	ReasonBudgetExhausted = "EphemeralContainerBudgetExhausted"
	// ReasonConfigTooLarge: the config exceeds MaxConfigBytes or
	// MaxCompressedConfigBytes.
	ReasonConfigTooLarge = "ConfigTooLarge"
	// ReasonBudgetKept: adding an ephemeral container would leave fewer
	// than Request.KeepBudget of the pod's budget; nothing was added.
	ReasonBudgetKept = "EphemeralContainerBudgetKept"
)

// imagePullGrace is how long an ephemeral container may wait for its image
// before the attempt is given up as failed.
const imagePullGrace = 2 * time.Minute

// ErrTooManyAttempts is returned when a container start already has
// MaxAttempts ephemeral containers that ran the very same request (the
// same command and config); a changed exporter is a new request.
var ErrTooManyAttempts = errors.New("too many attempts for this container start")

// EphemeralContainer is the Strategy that runs jmx-attach in an ephemeral
// container targeting the JVM's container. It needs the operator to be
// allowed to patch pods/ephemeralcontainers, and get, list and watch pods.
type EphemeralContainer struct {
	// Client talks to the API server.
	Client kubernetes.Interface
	// MaxAttempts bounds attempts per container start and purpose; 0 means
	// DefaultMaxAttempts.
	MaxAttempts int
	// Budget bounds the operator's ephemeral containers in one pod over its
	// whole life; 0 means DefaultBudget. Past it, Inject and Reconfigure
	// answer Outcome.Refused ReasonBudgetExhausted and add nothing.
	Budget int
}

// Name implements Strategy.
func (s *EphemeralContainer) Name() string { return "EphemeralContainer" }

// Inject implements Strategy.
func (s *EphemeralContainer) Inject(ctx context.Context, t Target, r Request) (Outcome, error) {
	if _, err := AgentHost(t.Pod); err != nil {
		return Outcome{}, err
	}
	args := append([]string{r.AttachHelperPath, "inject"}, injectArgs(t, r, true)...)
	args = append(args, "--agent", r.AgentPath, "--config-env", ConfigEnv)
	return s.run(ctx, t, r, InjectContainerPrefix(t.Container, t.ContainerID), args)
}

// Reconfigure implements Strategy.
func (s *EphemeralContainer) Reconfigure(ctx context.Context, t Target, r Request) (Outcome, error) {
	args := append([]string{r.AttachHelperPath, "reconfigure"}, reconfigureArgs(t, r, true)...)
	args = append(args, "--config-env", ConfigEnv)
	return s.run(ctx, t, r, ReconfigureContainerPrefix(t.Container, t.ContainerID, r.Config), args)
}

// InjectContainerPrefix is the name prefix of the ephemeral containers that
// inject one container start: "jmx-" and 10 hex digits of a hash of the
// container's name and ID. Attempt n is named prefix + n, so the name is
// deterministic per container start, and an operator that restarts finds
// the attempt its predecessor started instead of starting another.
func InjectContainerPrefix(container, containerID string) string {
	return "jmx-" + shortHash(container, containerID) + "-"
}

// ReconfigureContainerPrefix is the name prefix of the ephemeral containers
// that give one container start one config: "jmx-cfg-", a hash of the
// container, and a hash of the config.
func ReconfigureContainerPrefix(container, containerID string, config []byte) string {
	return "jmx-cfg-" + shortHash(container, containerID)[:8] + "-" + shortHash(string(config))[:8] + "-"
}

func shortHash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:10]
}

func (s *EphemeralContainer) maxAttempts() int {
	if s.MaxAttempts > 0 {
		return s.MaxAttempts
	}
	return DefaultMaxAttempts
}

func (s *EphemeralContainer) budget() int {
	if s.Budget > 0 {
		return s.Budget
	}
	return DefaultBudget
}

// OperatorContainers counts the pod's ephemeral containers that the operator
// added (named ContainerNamePrefix...).
func OperatorContainers(pod *corev1.Pod) int {
	n := 0
	for _, ec := range pod.Spec.EphemeralContainers {
		if strings.HasPrefix(ec.Name, ContainerNamePrefix) {
			n++
		}
	}
	return n
}

// refusedPatch says whether err is the API server refusing the request
// itself (authorization, admission, validation), which asking again will not
// change.
func refusedPatch(err error) bool {
	if apierrors.IsInvalid(err) && strings.Contains(err.Error(), "Duplicate value") {
		return false // a concurrent writer added the same name: look again
	}
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsMethodNotSupported(err) || strings.Contains(err.Error(), "denied the request") || strings.Contains(err.Error(), "denied request")
}

// run finds the latest attempt with prefix: a running one is waited for; a
// finished one (whose result an earlier run already took, or which a
// restarted operator cannot trust to answer today's request) is followed by
// a new attempt.
func (s *EphemeralContainer) run(ctx context.Context, t Target, r Request, prefix string, command []string) (Outcome, error) {
	if t.Pod == nil {
		return Outcome{}, errors.New("inject: no pod")
	}
	env, err := EncodeConfig(r.Config)
	if err != nil {
		return Outcome{Refused: ReasonConfigTooLarge, Detail: err.Error()}, nil
	}
	pods := s.Client.CoreV1().Pods(t.Pod.Namespace)
	var name string
	for try := 0; name == ""; try++ {
		pod, err := pods.Get(ctx, t.Pod.Name, metav1.GetOptions{})
		if err != nil {
			return Outcome{}, fmt.Errorf("get pod %s: %w", t, err)
		}
		if err := sameContainerStart(pod, t); err != nil {
			return Outcome{}, err
		}
		latest, n, running := latestAttempt(pod, prefix)
		if running {
			name = latest
			break
		}
		if o, err := s.mayAdd(pod, t, r, prefix, latest, command, env); err != nil || o.Refused != "" {
			return o, err
		}
		next := prefix + strconv.Itoa(n+1)
		patch, err := addPatch(pod, ephemeralSpec(t, r, next, command, env))
		if err != nil {
			return Outcome{}, err
		}
		_, err = pods.Patch(ctx, pod.Name, types.StrategicMergePatchType, patch,
			metav1.PatchOptions{FieldManager: "prometheus-jmx-exporter-operator"}, "ephemeralcontainers")
		switch {
		case err == nil:
			name = next
		case (apierrors.IsConflict(err) || apierrors.IsInvalid(err) && strings.Contains(err.Error(), "Duplicate value")) && try < 5:
			// Someone (another replica, a restarted predecessor) changed the
			// pod: look again.
			continue
		case refusedPatch(err):
			return Outcome{Refused: ReasonPatchRefused, Detail: truncate(fmt.Sprintf(
				"the API server refused the ephemeral container %s for %s: %v", next, t, err), 1024)}, nil
		default:
			return Outcome{}, fmt.Errorf("add ephemeral container %s to %s: %w", next, t, err)
		}
	}
	return s.await(ctx, t, name)
}

// mayAdd returns a refusal, or an error, when no new attempt with prefix may
// be added to pod, whose latest attempt is latest: the same request ran in
// MaxAttempts of them already, or the pod's ephemeral containers reach the
// Budget (or the part of it Request.KeepBudget keeps).
func (s *EphemeralContainer) mayAdd(pod *corev1.Pod, t Target, r Request, prefix, latest string, command []string, env string) (Outcome, error) {
	if same := sameAttempts(pod, prefix, command, env); same >= s.maxAttempts() {
		return Outcome{}, fmt.Errorf("%w (%d ephemeral containers %s* ran this very request; the last, %s: %s)", ErrTooManyAttempts,
			same, prefix, latest, lastWords(pod, latest))
	}
	if have := OperatorContainers(pod); r.KeepBudget > 0 && have+r.KeepBudget >= s.budget() && have < s.budget() {
		return Outcome{Refused: ReasonBudgetKept, Detail: fmt.Sprintf(
			"pod %s has %d of the operator's ephemeral containers of its budget of %d (--ephemeral-container-budget); the last %d are kept for its containers' next starts",
			t.Pod.Name, have, s.budget(), r.KeepBudget)}, nil
	}
	if have := OperatorContainers(pod); have >= s.budget() {
		return Outcome{Refused: ReasonBudgetExhausted, Detail: fmt.Sprintf(
			"pod %s already has %d of the operator's ephemeral containers, its budget for the pod's life (--ephemeral-container-budget=%d); ephemeral containers cannot be removed, so no more are added: recreate the pod, or use the Exec strategy",
			t.Pod.Name, have, s.budget())}, nil
	}
	return Outcome{}, nil
}

// ephemeralSpec is the ephemeral container name that runs command against
// t's container, with the config in ConfigEnv.
func ephemeralSpec(t Target, r Request, name string, command []string, env string) corev1.EphemeralContainer {
	return corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name:                     name,
			Image:                    r.Image,
			ImagePullPolicy:          r.PullPolicy,
			Command:                  command,
			Env:                      []corev1.EnvVar{{Name: ConfigEnv, Value: env}},
			TerminationMessagePath:   corev1.TerminationMessagePathDefault,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			SecurityContext:          SecurityContext(t),
		},
		TargetContainerName: t.Container,
	}
}

// addPatch is the patch that adds ec to pod: a strategic-merge patch adds the
// container by name, with the pod's UID and resourceVersion as
// preconditions, as kubectl debug does.
func addPatch(pod *corev1.Pod, ec corev1.EphemeralContainer) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID, "resourceVersion": pod.ResourceVersion},
		"spec":     map[string]any{"ephemeralContainers": []corev1.EphemeralContainer{ec}},
	})
}

// await waits for the end of the ephemeral container name in t's pod and
// returns what it reported. Waiting for the helper's end (up to Request.Wait
// for a JVM to appear) holds no slot of the operator's pool: ctx's deadline
// bounds it.
func (s *EphemeralContainer) await(ctx context.Context, t Target, name string) (Outcome, error) {
	Idle(ctx)
	status, err := waitTerminated(ctx, s.Client, t, name)
	if rerr := Resume(ctx); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return Outcome{}, err
	}
	o, err := parseOutcome([]byte(status.Message), int(status.ExitCode))
	if err != nil {
		return o, fmt.Errorf("ephemeral container %s in %s: %w", name, t, err)
	}
	return o, nil
}

// lastWords describes how the ephemeral container name ended, for the
// TooManyAttempts message.
func lastWords(pod *corev1.Pod, name string) string {
	for _, st := range pod.Status.EphemeralContainerStatuses {
		if st.Name != name {
			continue
		}
		if term := st.State.Terminated; term != nil {
			return truncate(fmt.Sprintf("exit %d %s %s", term.ExitCode, term.Reason, strings.TrimSpace(term.Message)), 400)
		}
		if w := st.State.Waiting; w != nil {
			return truncate(fmt.Sprintf("waiting: %s %s", w.Reason, w.Message), 400)
		}
	}
	return "no status"
}

// SecurityContext is the ephemeral container's security context: the least
// the JVM's case needs, and never more than the namespace already admitted
// for the target container. It never has SYS_PTRACE. Every case has
// allowPrivilegeEscalation false (no_new_privs), a read-only root file
// system and the runtime's default seccomp profile.
//
//   - A JVM of a known non-root user (the container status's user.linux, or
//     runAsUser and runAsGroup): jmx-attach runs as that uid and gid with
//     every capability dropped, which the restricted Pod Security level
//     admits. It reaches that user's JVMs as their owner; a JVM of another
//     user in the container is reported unreachable (proc-access-denied),
//     never forced.
//   - A root JVM, or a user that is unknown: jmx-attach runs as root with
//     exactly the target container's capabilities, written relative to the
//     runtime's default set (DefaultCapabilities): the defaults the target
//     lacks are dropped ("ALL" when it has none of them), and only what the
//     target itself added is added. A target within the baseline level so
//     yields an ephemeral container within it; for a target with the default
//     set nothing is added or dropped. The kernel lets root read a root
//     JVM's /proc entries without SYS_PTRACE because jmx-attach holds every
//     capability the JVM holds. A JVM of another, non-root user is handled
//     by jmx-attach running itself again as that JVM's uid and gid, which
//     uses SETUID and SETGID from the default set and leaves the new process
//     without any capability, so DAC_OVERRIDE, CHOWN, FOWNER, KILL and
//     SYS_PTRACE are never needed for it; a target that dropped SETUID or
//     SETGID gets that JVM reported unreachable with its reason.
//
// docs/jmx-attach.md lists the exact sets.
func SecurityContext(t Target) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if t.UID != nil && t.GID != nil && *t.UID != 0 {
		sc.RunAsUser = ptr.To(*t.UID)
		sc.RunAsGroup = ptr.To(*t.GID)
		sc.RunAsNonRoot = ptr.To(true)
		sc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
		return sc
	}
	sc.RunAsUser = ptr.To(int64(0))
	sc.RunAsGroup = ptr.To(int64(0))
	if t.GID != nil {
		sc.RunAsGroup = ptr.To(*t.GID)
	}
	sc.RunAsNonRoot = ptr.To(false)
	sc.Capabilities = relativeCapabilities(t.Capabilities)
	return sc
}

// relativeCapabilities writes the capability set have (nil: the runtime's
// default set) as drops from and additions to DefaultCapabilities. SYS_PTRACE
// is never added: a target that holds it (or is privileged) gets the
// runtime's default set and nothing more.
func relativeCapabilities(have []corev1.Capability) *corev1.Capabilities {
	caps := &corev1.Capabilities{}
	if have == nil {
		return caps
	}
	set := map[corev1.Capability]bool{}
	for _, c := range have {
		set[c] = true
	}
	if set["ALL"] || set["SYS_PTRACE"] {
		// A privileged target, or one that added SYS_PTRACE: its root JVM
		// holds SYS_PTRACE, which jmx-attach never gets, so the kernel denies
		// that JVM's /proc entries whatever else jmx-attach holds. Its other
		// additions would buy nothing: the runtime's default set is enough for
		// the container's non-root JVMs, and the root one is reported
		// proc-access-denied.
		return caps
	}
	defaults := map[corev1.Capability]bool{}
	kept := 0
	for _, c := range DefaultCapabilities {
		defaults[c] = true
		if set[c] {
			kept++
		} else {
			caps.Drop = append(caps.Drop, c)
		}
	}
	if kept == 0 {
		caps.Drop = []corev1.Capability{"ALL"}
	}
	for _, c := range have {
		if !defaults[c] && c != "SYS_PTRACE" {
			caps.Add = append(caps.Add, c)
		}
	}
	return caps
}

// sameContainerStart says whether the pod is the target's pod and its
// container still runs the target's instance.
func sameContainerStart(pod *corev1.Pod, t Target) error {
	if pod.UID != t.Pod.UID {
		return fmt.Errorf("pod %s was replaced", t)
	}
	if pod.DeletionTimestamp != nil {
		return fmt.Errorf("pod %s is being deleted", t)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == t.Container {
			if cs.ContainerID != t.ContainerID || cs.State.Running == nil {
				return fmt.Errorf("container %s restarted or stopped (now %q)", t, cs.ContainerID)
			}
			return nil
		}
	}
	return fmt.Errorf("container %s not found in the pod's status", t)
}

// latestAttempt returns the highest-numbered ephemeral container with prefix,
// its number (0 when there is none) and whether it has not terminated yet.
func latestAttempt(pod *corev1.Pod, prefix string) (name string, n int, running bool) {
	for _, ec := range pod.Spec.EphemeralContainers {
		if !strings.HasPrefix(ec.Name, prefix) {
			continue
		}
		k, err := strconv.Atoi(strings.TrimPrefix(ec.Name, prefix))
		if err != nil || k <= n {
			continue
		}
		name, n = ec.Name, k
	}
	if name == "" {
		return "", 0, false
	}
	for _, st := range pod.Status.EphemeralContainerStatuses {
		if st.Name == name {
			return name, n, st.State.Terminated == nil
		}
	}
	return name, n, true // added, not started yet
}

// sameAttempts counts the ephemeral containers with prefix that ran the
// same command with the same config as this attempt would. Only they count
// against the attempts of a container start: a changed exporter (another
// config, port or pattern) is a new request, which the operator tries
// again; the pod's budget (OperatorContainers) bounds them all.
func sameAttempts(pod *corev1.Pod, prefix string, command []string, env string) int {
	n := 0
	for _, ec := range pod.Spec.EphemeralContainers {
		if !strings.HasPrefix(ec.Name, prefix) || !slices.Equal(ec.Command, command) {
			continue
		}
		for _, e := range ec.Env {
			if e.Name == ConfigEnv && e.Value == env {
				n++
				break
			}
		}
	}
	return n
}

// waitTerminated watches the pod until the ephemeral container name has
// terminated, and returns its terminated state.
func waitTerminated(ctx context.Context, client kubernetes.Interface, t Target, name string) (*corev1.ContainerStateTerminated, error) {
	pods := client.CoreV1().Pods(t.Pod.Namespace)
	sel := fields.OneTermEqualSelector("metadata.name", t.Pod.Name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return pods.Watch(ctx, o)
		},
	}
	var done *corev1.ContainerStateTerminated
	var waitingSince time.Time
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, nil, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			return false, fmt.Errorf("pod %s was deleted", t)
		}
		pod, ok := ev.Object.(*corev1.Pod)
		if !ok {
			return false, nil
		}
		if pod.UID != t.Pod.UID {
			return false, fmt.Errorf("pod %s was replaced", t)
		}
		for _, st := range pod.Status.EphemeralContainerStatuses {
			if st.Name != name {
				continue
			}
			if st.State.Terminated != nil {
				done = st.State.Terminated
				return true, nil
			}
			if w := st.State.Waiting; w != nil && isImageProblem(w.Reason) {
				if waitingSince.IsZero() {
					waitingSince = time.Now()
				}
				if time.Since(waitingSince) > imagePullGrace || w.Reason == "InvalidImageName" {
					return false, fmt.Errorf("ephemeral container %s in %s cannot start: %s: %s", name, t, w.Reason, w.Message)
				}
			}
		}
		return false, nil
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, watchtools.ErrWatchClosed) || ctx.Err() != nil {
			return nil, fmt.Errorf("waiting for ephemeral container %s in %s: %w", name, t, err)
		}
		return nil, err
	}
	return done, nil
}

func isImageProblem(reason string) bool {
	switch reason {
	case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError":
		return true
	}
	return false
}
