package operator

// outcome.go classifies what a strategy answered for one container (an
// injection's or a reconfiguration's outcome) into success, a permanent
// failure with its reason, or a retry.

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// classified is one container's outcome.
type classified struct {
	class   string
	reason  string
	message string
	jvms    []JVMRecord
	noJVM   bool
	failure *Failure
	// rejected is the agent's message when a JVM that had the agent from an
	// earlier load refused the new config (it is in jvms, serving its old
	// config).
	rejected string
	// note is the agents' remark (jvm.InjectResult.Note).
	note string
}

// classify sorts an outcome into success, a permanent failure (not retried
// until something relevant changes) or a transient one (retried with
// backoff, a bounded number of times).
func classify(out inject.Outcome, err error) classified {
	if err != nil {
		return classified{class: resultRetry, reason: jmxv1alpha1.ReasonUnknown, message: err.Error()}
	}
	if out.NoJVM {
		return classified{class: resultSuccess, reason: jmxv1alpha1.ReasonNoJVMFound, noJVM: true}
	}
	if out.Refused != "" {
		reason := out.Refused
		switch reason {
		case inject.ReasonConfigTooLarge:
			reason = jmxv1alpha1.ReasonConfigTooLarge
		case inject.ReasonOutputTooLarge:
			reason = jmxv1alpha1.ReasonExecOutputTooLarge
		}
		return classified{class: resultFailure, reason: reason, failure: &Failure{Reason: reason, Message: out.Detail}}
	}
	if len(out.Results) == 0 {
		return classified{class: resultFailure, reason: jmxv1alpha1.ReasonInvalidRequest,
			failure: &Failure{Reason: jmxv1alpha1.ReasonInvalidRequest, Message: "jmx-attach refused the request: " + out.Detail}}
	}
	c := classified{class: resultSuccess}
	var transient []string
	var notes []string
	for _, res := range out.Results {
		if res.Note != "" {
			notes = appendOnce(notes, res.Note)
		}
		if res.OK() || res.Reason == jvm.ReasonConfigRejected {
			jr := JVMRecord{PID: res.NSPID, Main: res.MainClass, Port: int32(res.Port)}
			if jr.PID == 0 {
				jr.PID = res.PID
			}
			if st := startedAt(res); st != nil {
				jr.StartedAt = st
			}
			c.jvms = append(c.jvms, jr)
			if !res.OK() && c.rejected == "" {
				c.rejected = fmt.Sprintf("JVM %d (%s): %s", res.NSPID, res.MainClass, res.Message)
			}
			continue
		}
		reason, permanent := failureReason(res.Reason)
		msg := fmt.Sprintf("JVM %d (%s): %s", res.NSPID, res.MainClass, res.Message)
		if res.Reason == jvm.ReasonProcessGone {
			// A JVM that ended during the load trips the breaker: it wins
			// over every other outcome.
			c.failure = &Failure{Reason: reason, Message: msg}
			transient = nil
			break
		}
		if !permanent {
			transient = append(transient, reason+": "+msg)
			continue
		}
		if c.failure == nil {
			c.failure = &Failure{Reason: reason, Message: msg}
		}
	}
	c.note = strings.Join(notes, "; ")
	switch {
	case c.failure != nil && c.failure.Reason == jmxv1alpha1.ReasonJVMEnded:
		c.class, c.reason = resultFailure, c.failure.Reason
	case len(transient) > 0:
		return classified{class: resultRetry, reason: strings.SplitN(transient[0], ":", 2)[0], message: strings.Join(transient, "; ")}
	case c.failure != nil:
		c.class, c.reason = resultFailure, c.failure.Reason
	}
	return c
}

// refusedUnderBoth turns a JVM's refusal of a live attach (AttachDisabled,
// DynamicLoadingDisabled) into AttachRefused, for mode Both: the pod gets the
// agent at start when it is next created. The refusal's own reason stays in
// the message.
func refusedUnderBoth(c classified, restartOnRefusal bool) classified {
	if c.failure == nil || c.failure.Reason != jmxv1alpha1.ReasonAttachDisabled && c.failure.Reason != jmxv1alpha1.ReasonDynamicLoadingDisabled {
		return c
	}
	msg := fmt.Sprintf("%s: %s; with spec.injection.mode Both the pod gets the agent at start when it is next created, for example by a rollout "+
		"(a container restart keeps the pod's spec and does not)", c.failure.Reason, c.failure.Message)
	if restartOnRefusal {
		msg += "; restartOnRefusal is on: the operator evicts the pod, one pod of the exporter at a time, so that its controller recreates it"
	}
	c.failure = &Failure{Reason: jmxv1alpha1.ReasonAttachRefused, Message: msg}
	c.reason = jmxv1alpha1.ReasonAttachRefused
	return c
}

// failureReason maps a jmx-attach reason to a CamelCase reason and says
// whether it is permanent: not retried until the container restarts or the
// exporter's generation or config changes.
func failureReason(r jvm.Reason) (string, bool) {
	switch r {
	case jvm.ReasonAttachDisabled:
		return jmxv1alpha1.ReasonAttachDisabled, true
	case jvm.ReasonDynamicLoadingDisabled:
		return jmxv1alpha1.ReasonDynamicLoadingDisabled, true
	case jvm.ReasonPortInUse:
		return jmxv1alpha1.ReasonPortInUse, true
	case jvm.ReasonAgentStartFailed:
		return jmxv1alpha1.ReasonAgentStartFailed, true
	case jvm.ReasonAgentAlreadyPresent:
		return jmxv1alpha1.ReasonAgentAlreadyPresent, true
	case jvm.ReasonRootInaccessible:
		return jmxv1alpha1.ReasonRootInaccessible, true
	case jvm.ReasonInsufficientMemory:
		return jmxv1alpha1.ReasonInsufficientMemory, true
	case jvm.ReasonCopyFailed:
		return jmxv1alpha1.ReasonCopyFailed, true
	case jvm.ReasonJVMUnsupported:
		return jmxv1alpha1.ReasonJVMUnsupported, true
	case jvm.ReasonConfigInvalid:
		return jmxv1alpha1.ReasonConfigInvalid, true
	case jvm.ReasonConfigRejected:
		return jmxv1alpha1.ReasonConfigRejected, true
	case jvm.ReasonProcessGone:
		return jmxv1alpha1.ReasonJVMEnded, true
	}
	name := camel(string(r))
	switch r {
	case jvm.ReasonTooYoung, jvm.ReasonAttachTimeout, jvm.ReasonConnectFailed, jvm.ReasonHTTPCheckFailed,
		jvm.ReasonInternal, jvm.ReasonTruncated, "":
		return name, false
	}
	// not-jvm, sigquit-not-handled, agent-jar-invalid, port-not-permitted,
	// port-check-failed, args-too-long, agent-load-failed,
	// agent-not-listening, invalid-request, lock-failed and anything new:
	// retrying would fail the same way or risk the JVM.
	return name, true
}

// camel turns "port-not-permitted" into "PortNotPermitted".
func camel(s string) string {
	if s == "" {
		return "Unknown"
	}
	var b strings.Builder
	for _, part := range strings.Split(s, "-") {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// event reason for sdk's recorder needs the object to have a kind; Pod refs
// are built in event().
var _ sdk.Handler = (*Reconciler)(nil)

// startedAt is the JVM's start time from its result, when jmx-attach knew it.
func startedAt(res jvm.InjectResult) *metav1.Time {
	if res.StartedAt.IsZero() {
		return nil
	}
	t := metav1.NewTime(res.StartedAt)
	return &t
}

// classifyReload sorts a reconfiguration's outcome: the rejection to record
// when an agent refused the config or nothing ran (asking again without a
// change gets the same answer), the agents' notes, or a transient error
// (retried with backoff, a bounded number of times).
func classifyReload(out inject.Outcome, err error, configHash string) (*Rejection, []string, error) {
	if err != nil {
		return nil, nil, err
	}
	var rejected *Rejection
	var notes []string
	for _, res := range out.Results {
		switch {
		case res.OK():
			if res.Note != "" {
				notes = appendOnce(notes, res.Note)
			}
		case res.Reason == jvm.ReasonNotInjected:
			// A JVM that never got the agent (a second JVM that was
			// refused, or started later) has nothing to reconfigure.
		case res.Reason == jvm.ReasonConfigRejected:
			if rejected == nil {
				rejected = &Rejection{ConfigHash: configHash, Reason: jmxv1alpha1.ReasonConfigRejected,
					Message: truncateMsg(fmt.Sprintf("JVM %d (%s): %s", res.NSPID, res.MainClass, res.Message), 2048)}
			}
		default:
			if err == nil {
				err = fmt.Errorf("JVM %d (%s): %s: %s", res.NSPID, res.MainClass, res.Reason, res.Message)
			}
		}
	}
	switch {
	case out.Refused != "":
		// Nothing ran: the pod's budget is spent, or the API server
		// refused.
		return &Rejection{ConfigHash: configHash, Reason: out.Refused, Message: truncateMsg(out.Detail, 2048)}, notes, nil
	case len(out.Results) == 0 && err == nil:
		err = fmt.Errorf("no result: %s", out.Detail)
	}
	return rejected, notes, err
}
