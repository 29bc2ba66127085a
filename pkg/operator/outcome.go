package operator

// outcome.go classifies what a strategy answered for one container (an
// injection's or a reconfiguration's outcome) into success, a permanent
// failure with its reason, or a retry.

import (
	"errors"
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
	// err is a transient failure's cause, for the bound of attempts
	// (tooManyAttempts).
	err error
}

// taskKind is what a task asked of the agents: a load (inject, and a late
// look for a JVM) or a reload (reconfigure). The one classifier, classify,
// reads both; outcomePolicies is the table of where they differ.
type taskKind int

const (
	taskLoad taskKind = iota
	taskReload
)

// outcomePolicy is how one kind of task reads an outcome.
type outcomePolicy struct {
	// noJVMSucceeds: an outcome that found no JVM is a success (a load's:
	// the JVM may start later); a reload reads it as an outcome with no
	// result.
	noJVMSucceeds bool
	// emptyRetries: an outcome with no result and no refusal is retried (a
	// reload's: "no result") rather than a refused request (a load's:
	// InvalidRequest).
	emptyRetries bool
	// permanentWins: a permanent failure wins over a transient one (a
	// reload's: an agent that refused the config refuses it again);
	// otherwise a transient one wins (a load's: the next attempt may load
	// the agent everywhere). A JVM that ended during a load wins over both.
	permanentWins bool
	// judge says what one JVM's result means.
	judge func(jvm.InjectResult) judged
}

// outcomePolicies is the one table of the differences between a load and a
// reload.
var outcomePolicies = map[taskKind]outcomePolicy{
	taskLoad:   {noJVMSucceeds: true, judge: judgeLoad},
	taskReload: {emptyRetries: true, permanentWins: true, judge: judgeReload},
}

// resultMeaning is what one JVM's result means for its task.
type resultMeaning int

const (
	meansServes    resultMeaning = iota // the JVM has the agent (with the new config or, rejected, its old one)
	meansNothing                        // the JVM has nothing to do with the task
	meansPermanent                      // a failure not retried until something relevant changes
	meansTransient                      // a failure retried with backoff, a bounded number of times
	meansEnded                          // the JVM ended during the load: it wins over every other outcome
)

// judged is one JVM's result as its task reads it.
type judged struct {
	means resultMeaning
	// rejected: the JVM refused the config (ConfigRejected).
	rejected bool
	// reason and message are the failure's, when it is one.
	reason, message string
}

// judgeLoad reads one JVM's result of a load: a JVM that refused the config
// keeps its agent (from an earlier load) and serves its old config; other
// failures are permanent or transient as failureReason says.
func judgeLoad(res jvm.InjectResult) judged {
	msg := fmt.Sprintf("JVM %d (%s): %s", res.NSPID, res.MainClass, res.Message)
	if res.OK() || res.Reason == jvm.ReasonConfigRejected {
		return judged{means: meansServes, rejected: !res.OK(), message: msg}
	}
	reason, permanent := failureReason(res.Reason)
	switch {
	case res.Reason == jvm.ReasonProcessGone:
		return judged{means: meansEnded, reason: reason, message: msg}
	case permanent:
		return judged{means: meansPermanent, reason: reason, message: msg}
	}
	return judged{means: meansTransient, reason: reason, message: reason + ": " + msg}
}

// judgeReload reads one JVM's result of a reload: a JVM that never got the
// agent has nothing to reconfigure, a refusal of the config is permanent
// (asking again without a change gets the same answer), and any other
// failure is transient.
func judgeReload(res jvm.InjectResult) judged {
	switch {
	case res.OK():
		return judged{means: meansServes}
	case res.Reason == jvm.ReasonNotInjected:
		// A second JVM that was refused, or started later.
		return judged{means: meansNothing}
	case res.Reason == jvm.ReasonConfigRejected:
		return judged{means: meansPermanent, rejected: true, reason: jmxv1alpha1.ReasonConfigRejected,
			message: fmt.Sprintf("JVM %d (%s): %s", res.NSPID, res.MainClass, res.Message)}
	}
	return judged{means: meansTransient, reason: jmxv1alpha1.ReasonReconfigureFailed,
		message: fmt.Sprintf("JVM %d (%s): %s: %s", res.NSPID, res.MainClass, res.Reason, res.Message)}
}

// classify sorts the outcome of a task of kind into success, a permanent
// failure (not retried until something relevant changes; for a reload, the
// rejection to record) or a transient one (retried with backoff, a bounded
// number of times: tooManyAttempts, for loads and reloads alike).
func classify(kind taskKind, out inject.Outcome, err error) classified {
	pol := outcomePolicies[kind]
	switch {
	case err != nil:
		return classified{class: resultRetry, reason: jmxv1alpha1.ReasonUnknown, message: err.Error(), err: err}
	case out.Refused != "":
		// Nothing ran: the pod's budget is spent, or the API server (or
		// the strategy) refused.
		reason := refusedReason(out.Refused)
		return classified{class: resultFailure, reason: reason, message: out.Detail, failure: &Failure{Reason: reason, Message: out.Detail}}
	case out.NoJVM && pol.noJVMSucceeds:
		return classified{class: resultSuccess, reason: jmxv1alpha1.ReasonNoJVMFound, noJVM: true}
	case len(out.Results) == 0 && pol.emptyRetries:
		err := fmt.Errorf("no result: %s", out.Detail)
		return classified{class: resultRetry, reason: jmxv1alpha1.ReasonReconfigureFailed, message: err.Error(), err: err}
	case len(out.Results) == 0:
		return classified{class: resultFailure, reason: jmxv1alpha1.ReasonInvalidRequest,
			failure: &Failure{Reason: jmxv1alpha1.ReasonInvalidRequest, Message: "jmx-attach refused the request: " + out.Detail}}
	}
	return classifyResults(kind, pol, out.Results)
}

// classifyResults sorts the per-JVM results of an outcome (classify).
func classifyResults(kind taskKind, pol outcomePolicy, results []jvm.InjectResult) classified {
	c := classified{class: resultSuccess}
	var transient []judged
	var permanent, ended *judged
	var notes []string
	for _, res := range results {
		j := pol.judge(res)
		if res.Note != "" && (kind == taskLoad || j.means == meansServes) {
			notes = appendOnce(notes, res.Note)
		}
		switch j.means {
		case meansServes:
			c.jvms = append(c.jvms, jvmRecord(res))
			if j.rejected && c.rejected == "" {
				c.rejected = j.message
			}
		case meansEnded:
			ended = &j
		case meansTransient:
			transient = append(transient, j)
		case meansPermanent:
			if permanent == nil {
				permanent = &j
			}
		}
		if ended != nil {
			break
		}
	}
	c.note = strings.Join(notes, "; ")
	fail := func(j *judged) classified {
		c.class, c.reason, c.message, c.failure = resultFailure, j.reason, j.message, &Failure{Reason: j.reason, Message: j.message}
		return c
	}
	switch {
	case ended != nil:
		return fail(ended)
	case permanent != nil && pol.permanentWins:
		return fail(permanent)
	case len(transient) > 0:
		msgs := make([]string, len(transient))
		for i, t := range transient {
			msgs[i] = t.message
		}
		msg := strings.Join(msgs, "; ")
		if kind == taskReload {
			msg = transient[0].message // the first cause, as a reload's error
		}
		return classified{class: resultRetry, reason: transient[0].reason, message: msg, err: errors.New(msg)}
	case permanent != nil:
		return fail(permanent)
	}
	return c
}

// refusedReason is the reason of an outcome the strategy refused before
// anything ran.
func refusedReason(refused string) string {
	switch refused {
	case inject.ReasonConfigTooLarge:
		return jmxv1alpha1.ReasonConfigTooLarge
	case inject.ReasonOutputTooLarge:
		return jmxv1alpha1.ReasonExecOutputTooLarge
	}
	return refused
}

// jvmRecord is the record of a JVM that has the agent.
func jvmRecord(res jvm.InjectResult) JVMRecord {
	jr := JVMRecord{PID: res.NSPID, Main: res.MainClass, Port: int32(res.Port)}
	if jr.PID == 0 {
		jr.PID = res.PID
	}
	if st := startedAt(res); st != nil {
		jr.StartedAt = st
	}
	return jr
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

// attachReason is what a jmx-attach reason means to the operator: the
// reason it writes (a constant of pkg/apis) and whether the failure is
// permanent: not retried until the container restarts or the exporter's
// generation or config changes.
type attachReason struct {
	reason    string
	permanent bool
}

// attachReasons maps every reason of pkg/jvm (jmx-attach's result line) to
// its meaning; TestEveryAttachReasonHasItsConstant fails when pkg/jvm gains
// one that is not here.
var attachReasons = map[jvm.Reason]attachReason{
	jvm.ReasonAttachDisabled:         {jmxv1alpha1.ReasonAttachDisabled, true},
	jvm.ReasonDynamicLoadingDisabled: {jmxv1alpha1.ReasonDynamicLoadingDisabled, true},
	jvm.ReasonPortInUse:              {jmxv1alpha1.ReasonPortInUse, true},
	jvm.ReasonAgentStartFailed:       {jmxv1alpha1.ReasonAgentStartFailed, true},
	jvm.ReasonAgentAlreadyPresent:    {jmxv1alpha1.ReasonAgentAlreadyPresent, true},
	jvm.ReasonRootInaccessible:       {jmxv1alpha1.ReasonRootInaccessible, true},
	jvm.ReasonInsufficientMemory:     {jmxv1alpha1.ReasonInsufficientMemory, true},
	jvm.ReasonCopyFailed:             {jmxv1alpha1.ReasonCopyFailed, true},
	jvm.ReasonJVMUnsupported:         {jmxv1alpha1.ReasonJVMUnsupported, true},
	jvm.ReasonConfigInvalid:          {jmxv1alpha1.ReasonConfigInvalid, true},
	jvm.ReasonConfigRejected:         {jmxv1alpha1.ReasonConfigRejected, true},
	jvm.ReasonProcessGone:            {jmxv1alpha1.ReasonJVMEnded, true},
	// Transient: retried with backoff.
	jvm.ReasonTooYoung:        {jmxv1alpha1.ReasonTooYoung, false},
	jvm.ReasonAttachTimeout:   {jmxv1alpha1.ReasonAttachTimeout, false},
	jvm.ReasonConnectFailed:   {jmxv1alpha1.ReasonConnectFailed, false},
	jvm.ReasonHTTPCheckFailed: {jmxv1alpha1.ReasonHTTPCheckFailed, false},
	jvm.ReasonInternal:        {jmxv1alpha1.ReasonInternal, false},
	jvm.ReasonTruncated:       {jmxv1alpha1.ReasonTruncated, false},
	"":                        {jmxv1alpha1.ReasonUnknown, false},
	// Retrying would fail the same way or risk the JVM.
	jvm.ReasonNotJVM:            {jmxv1alpha1.ReasonNotJVM, true},
	jvm.ReasonSignalNotHandled:  {jmxv1alpha1.ReasonSignalNotHandled, true},
	jvm.ReasonAgentJarInvalid:   {jmxv1alpha1.ReasonAgentJarInvalid, true},
	jvm.ReasonPortNotPermitted:  {jmxv1alpha1.ReasonPortNotPermitted, true},
	jvm.ReasonPortCheckFailed:   {jmxv1alpha1.ReasonPortCheckFailed, true},
	jvm.ReasonArgsTooLong:       {jmxv1alpha1.ReasonArgsTooLong, true},
	jvm.ReasonAgentLoadFailed:   {jmxv1alpha1.ReasonAgentLoadFailed, true},
	jvm.ReasonNotListening:      {jmxv1alpha1.ReasonAgentNotListening, true},
	jvm.ReasonInvalidRequest:    {jmxv1alpha1.ReasonInvalidRequest, true},
	jvm.ReasonAccessDenied:      {jmxv1alpha1.ReasonProcAccessDenied, true},
	jvm.ReasonLockFailed:        {jmxv1alpha1.ReasonLockFailed, true},
	jvm.ReasonNotInjected:       {jmxv1alpha1.ReasonNotInjected, true},
	jvm.ReasonBundleInvalid:     {jmxv1alpha1.ReasonBundleInvalid, true},
	jvm.ReasonContainerNotFound: {jmxv1alpha1.ReasonContainerNotFound, true},
}

// failureReason maps a jmx-attach reason to the operator's reason and says
// whether it is permanent (attachReasons). A reason this operator does not
// know (a newer jmx-attach's) is named as jmx-attach names it, in CamelCase,
// and not retried.
func failureReason(r jvm.Reason) (string, bool) {
	if a, ok := attachReasons[r]; ok {
		return a.reason, a.permanent
	}
	return camel(string(r)), true
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
