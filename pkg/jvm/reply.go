package jvm

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ReplyFormat names the reply layouts of the HotSpot "load" command.
type ReplyFormat string

const (
	// ReplyJDK8 is JDK 8's layout: the completion status line, then Agent_OnAttach's return code as a bare
	// number.
	ReplyJDK8 ReplyFormat = "jdk8"
	// ReplyJDK9 is the layout from JDK 9 on: the completion status line, then "return code: N". Up to JDK 20 a
	// library that cannot be loaded is reported with completion status 0 and a message instead.
	ReplyJDK9 ReplyFormat = "jdk9"
	// ReplyFailed is a non-zero completion status followed by the error message. JDK 21 and later use it for most
	// loads that fail before Agent_OnAttach runs; some refusals (dynamic agent loading switched off, on JDK 25)
	// come with status 0 and a message instead, which Err maps by the message.
	ReplyFailed ReplyFormat = "failed"
	// ReplyOther is any other command's output.
	ReplyOther ReplyFormat = "other"
)

// JPLIS (java.instrument) return codes of Agent_OnAttach, as the attach client in the JDK maps them.
const (
	// ReturnENOMEM is JNI_ENOMEM: the agent could not allocate memory.
	ReturnENOMEM = -4
	// ReturnBadJar means the agent jar could not be opened or its manifest has no Agent-Class.
	ReturnBadJar = 100
	// ReturnNotOnClassPath means the jar could not be added to the system class path.
	ReturnNotOnClassPath = 101
	// ReturnStartFailed means the agent class was loaded but agentmain threw or could not be called.
	ReturnStartFailed = 102
)

// statusBadVersion is the completion status of a protocol version the JVM does not speak.
const statusBadVersion = 101

// Reply is a parsed attach-listener reply.
type Reply struct {
	// Status is the completion status of the operation (0: the operation ran).
	Status int
	// Format is the layout the reply was recognised as.
	Format ReplyFormat
	// ReturnCode is Agent_OnAttach's return code for "load" (0: the agent started); valid when HasReturnCode.
	ReturnCode    int
	HasReturnCode bool
	// Message is the remaining output: the error text, or the output of commands other than "load".
	Message string
}

// ErrMalformedReply is returned (wrapped) for a reply that does not follow the protocol.
var ErrMalformedReply = errors.New("malformed attach reply")

// ParseReply parses the attach listener's reply to command cmd. It only decodes: a reply that reports a failure
// parses without error, and Reply.Err turns it into one.
func ParseReply(cmd string, data []byte) (Reply, error) {
	first, rest, _ := bytes.Cut(data, []byte("\n"))
	status, err := strconv.Atoi(strings.TrimSpace(string(first)))
	if err != nil {
		return Reply{}, fmt.Errorf("%w: completion status %q is not a number", ErrMalformedReply, truncate(first))
	}
	r := Reply{Status: status, Format: ReplyOther}
	if status != 0 {
		r.Format = ReplyFailed
		r.Message = joinLines(rest)
		return r, nil
	}
	if cmd != "load" {
		r.Message = string(rest)
		return r, nil
	}
	line, tail, _ := bytes.Cut(rest, []byte("\n"))
	text := strings.TrimSpace(string(line))
	if v, ok := strings.CutPrefix(text, "return code: "); ok {
		rc, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return Reply{}, fmt.Errorf("%w: return code %q is not a number", ErrMalformedReply, truncate(line))
		}
		r.Format, r.ReturnCode, r.HasReturnCode = ReplyJDK9, rc, true
		r.Message = joinLines(tail)
		return r, nil
	}
	if rc, err := strconv.Atoi(text); err == nil {
		r.Format, r.ReturnCode, r.HasReturnCode = ReplyJDK8, rc, true
		r.Message = joinLines(tail)
		return r, nil
	}
	// JDK 9 to 20 report a library that cannot be loaded as status 0 plus a message.
	r.Format = ReplyJDK9
	r.Message = joinLines(rest)
	return r, nil
}

// dynamicLoadingDisabledMessage begins HotSpot's refusal of "load" in a JVM started with
// -XX:-EnableDynamicAgentLoading. JDK 17 sends it with completion status -1, JDK 25 with status 0.
const dynamicLoadingDisabledMessage = "Dynamic agent loading is not enabled"

// Err returns nil when the reply reports success and otherwise an *AttachError with a reason.
func (r Reply) Err() error {
	switch {
	case r.Format != ReplyOther && strings.Contains(r.Message, dynamicLoadingDisabledMessage):
		return &AttachError{Reason: ReasonDynamicLoadingDisabled, Msg: fmt.Sprintf(
			"the target VM runs with -XX:-EnableDynamicAgentLoading and refused the agent: %s", r.Message)}
	case r.Status == statusBadVersion && r.Format == ReplyFailed:
		return &AttachError{Reason: ReasonAgentLoadFailed, Msg: "protocol mismatch with the target VM: " + r.Message}
	case r.Status != 0:
		msg := r.Message
		if msg == "" {
			msg = "command failed in the target VM"
		}
		return &AttachError{Reason: ReasonAgentLoadFailed, Msg: fmt.Sprintf("attach operation failed (status %d): %s", r.Status, msg)}
	case r.Format == ReplyOther:
		return nil
	case !r.HasReturnCode && r.Message == "":
		return &AttachError{Reason: ReasonAgentLoadFailed, Msg: "the target VM did not respond to load"}
	case !r.HasReturnCode:
		return &AttachError{Reason: ReasonAgentLoadFailed, Msg: "failed to load the agent library: " + r.Message}
	}
	switch r.ReturnCode {
	case 0:
		return nil
	case ReturnBadJar:
		return &AttachError{Reason: ReasonAgentJarInvalid, ReturnCode: r.ReturnCode,
			Msg: "the target VM could not open the agent jar or found no Agent-Class in its manifest"}
	case ReturnNotOnClassPath:
		return &AttachError{Reason: ReasonAgentLoadFailed, ReturnCode: r.ReturnCode,
			Msg: "the target VM could not add the agent jar to the system class path"}
	case ReturnStartFailed:
		return &AttachError{Reason: ReasonAgentStartFailed, ReturnCode: r.ReturnCode,
			Msg: "the agent jar was loaded but the agent failed to start (agentmain threw; see the JVM's stderr)"}
	case ReturnENOMEM:
		return &AttachError{Reason: ReasonAgentLoadFailed, ReturnCode: r.ReturnCode,
			Msg: "the target VM ran out of memory loading the agent"}
	default:
		return &AttachError{Reason: ReasonAgentLoadFailed, ReturnCode: r.ReturnCode,
			Msg: fmt.Sprintf("loading the agent failed with return code %d", r.ReturnCode)}
	}
}

// AttachError is an attach or agent-load failure with a machine-readable reason.
type AttachError struct {
	// Reason classifies the failure.
	Reason Reason
	// ReturnCode is Agent_OnAttach's return code, when the failure came from it.
	ReturnCode int
	// Msg describes the failure.
	Msg string
	// Err is the underlying error, if any.
	Err error
}

// Error returns the message, with the underlying error.
func (e *AttachError) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

// Unwrap returns the underlying error.
func (e *AttachError) Unwrap() error { return e.Err }

// ReasonOf returns the reason carried by err (an *AttachError anywhere in its chain), ReasonNotJVM or
// ReasonProcessGone for the sentinel errors, or ReasonInternal.
func ReasonOf(err error) Reason {
	if err == nil {
		return ""
	}
	var ae *AttachError
	if errors.As(err, &ae) {
		return ae.Reason
	}
	switch {
	case errors.Is(err, ErrNotJVM):
		return ReasonNotJVM
	case errors.Is(err, ErrProcessGone):
		return ReasonProcessGone
	}
	return ReasonInternal
}

func joinLines(b []byte) string {
	return strings.Join(strings.Fields(string(b)), " ")
}

func truncate(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}
