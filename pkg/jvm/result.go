package jvm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Reason is a machine-readable cause of an injection result. The operator branches on it, so values never change
// meaning.
type Reason string

// Reasons reported in InjectResult.Reason.
const (
	// ReasonNotJVM: the pid is not a HotSpot JVM; it was not signalled.
	ReasonNotJVM Reason = "not-jvm"
	// ReasonProcessGone: the process ended, or its pid was reused, during the injection. When the JVM ended while
	// it was loading the agent, the message says how, if /proc still tells.
	ReasonProcessGone Reason = "process-gone"
	// ReasonTooYoung: the context ended while waiting for the JVM to reach the minimum age.
	ReasonTooYoung Reason = "too-young"
	// ReasonAttachDisabled: the JVM runs with -XX:+DisableAttachMechanism.
	ReasonAttachDisabled Reason = "attach-disabled"
	// ReasonDynamicLoadingDisabled: the JVM runs with -XX:-EnableDynamicAgentLoading and refuses agents loaded
	// over the attach protocol. Found in its options before any signal, or read from the JVM's own refusal when
	// the flag is set somewhere jmx-attach does not look (-XX:Flags, -XX:VMOptionsFile).
	ReasonDynamicLoadingDisabled Reason = "dynamic-loading-disabled"
	// ReasonSignalNotHandled: the JVM has no attach listener running and does not handle SIGQUIT (an -Xrs or
	// -XX:+ReduceSignalUsage JVM whose attach socket was removed, or one not yet initialised), so SIGQUIT would
	// kill it; it was not signalled. An -Xrs JVM with its socket is injected without a signal.
	ReasonSignalNotHandled Reason = "sigquit-not-handled"
	// ReasonAgentJarInvalid: the agent jar is missing, unreadable, or has no Agent-Class.
	ReasonAgentJarInvalid Reason = "agent-jar-invalid"
	// ReasonConfigInvalid: the exporter configuration does not parse or has unexpected keys or types, found by
	// the prefilter before any signal, or by the agent's own parser (the collector's message) when it refused
	// to start.
	ReasonConfigInvalid Reason = "config-invalid"
	// ReasonPortInUse: a socket in the target's network namespace holds the port (a listener, a connection whose
	// local port it is, or a socket bound to it), so the agent could not bind it.
	ReasonPortInUse Reason = "port-in-use"
	// ReasonPortNotPermitted: the port is below net.ipv4.ip_unprivileged_port_start in the target's network
	// namespace and the JVM lacks CAP_NET_BIND_SERVICE, so the agent could not bind it.
	ReasonPortNotPermitted Reason = "port-not-permitted"
	// ReasonPortCheckFailed: the port could not be checked in the target's network namespace (joining it needs
	// CAP_SYS_ADMIN when jmx-attach runs outside it); nothing was loaded rather than risk the JVM.
	ReasonPortCheckFailed Reason = "port-check-failed"
	// ReasonArgsTooLong: the agent argument is longer than the attach protocol allows.
	ReasonArgsTooLong Reason = "args-too-long"
	// ReasonCopyFailed: the agent jar or config could not be placed into the target's filesystem.
	ReasonCopyFailed Reason = "copy-failed"
	// ReasonAttachTimeout: the JVM did not open its attach socket in time.
	ReasonAttachTimeout Reason = "attach-timeout"
	// ReasonConnectFailed: the attach socket could not be connected or talked to.
	ReasonConnectFailed Reason = "connect-failed"
	// ReasonAgentLoadFailed: the JVM refused or failed to load the agent.
	ReasonAgentLoadFailed Reason = "agent-load-failed"
	// ReasonAgentStartFailed: the agent was loaded but its agentmain failed.
	ReasonAgentStartFailed Reason = "agent-start-failed"
	// ReasonNotListening: an agent was loaded before (marker present) but its port does not listen; it is not
	// loaded twice.
	ReasonNotListening Reason = "agent-not-listening"
	// ReasonHTTPCheckFailed: the agent was loaded but its port did not answer HTTP in time.
	ReasonHTTPCheckFailed Reason = "http-check-failed"
	// ReasonInvalidRequest: the request itself is invalid (port out of range, a host that is not an IP address or
	// not an address in the target's network namespace).
	ReasonInvalidRequest Reason = "invalid-request"
	// ReasonAccessDenied: this process may not read the JVM's /proc entries (maps, root, environ). Without
	// CAP_SYS_PTRACE the kernel allows that only for a process of the same uid whose permitted capabilities
	// include all of the JVM's; the message names the capabilities the JVM has and this process lacks.
	ReasonAccessDenied Reason = "proc-access-denied"
	// ReasonLockFailed: the per-JVM lock that keeps two injections or reconfigurations of one JVM apart could
	// not be taken: the lock file is not one that root or the JVM's user made, or another injection held it
	// too long. Nothing was loaded.
	ReasonLockFailed Reason = "lock-failed"
	// ReasonNotInjected: reconfigure found no marker of an earlier injection into the JVM; nothing was changed.
	ReasonNotInjected Reason = "not-injected"
	// ReasonBundleInvalid: the bundle on stdin is not a tar stream of exactly the expected entries within
	// their size limits; no JVM was touched.
	ReasonBundleInvalid Reason = "bundle-invalid"
	// ReasonTruncated: only in a termination log written by FormatTerminationLog, the last line when not every
	// result fitted; its message says how many results were left out, and its PID is 0.
	ReasonTruncated Reason = "truncated"
	// ReasonAgentAlreadyPresent: a jmx_exporter agent or collector is already in the JVM: a -javaagent of
	// jmx_exporter (a jar named jmx_prometheus*, or whose manifest names a class of io.prometheus.jmx) in its
	// command line, JAVA_TOOL_OPTIONS or JDK_JAVA_OPTIONS, found before any signal, or reported by the agent
	// itself. A second one would fail to register its collector, so nothing is loaded.
	ReasonAgentAlreadyPresent Reason = "agent-already-present"
	// ReasonConfigRejected: reconfigure: the agent read the new config, rejected it and kept its old one; the
	// message is the agent's.
	ReasonConfigRejected Reason = "config-rejected"
	// ReasonRootInaccessible: the JVM's root directory (/proc/<pid>/root) cannot be opened by this process, so
	// nothing can be copied into its filesystem; nothing was signalled.
	ReasonRootInaccessible Reason = "root-inaccessible"
	// ReasonInsufficientMemory: the JVM's container has a memory limit that leaves less room than the agent
	// needs; the message gives the figures. Nothing was signalled.
	ReasonInsufficientMemory Reason = "insufficient-memory"
	// ReasonJVMUnsupported: the agent refused to start because the JVM lacks a module it needs (jdk.httpserver
	// or java.management, as in a jlink-trimmed runtime); the message names it. The JVM is left as it was.
	ReasonJVMUnsupported Reason = "jvm-unsupported"
	// ReasonInternal: any other failure.
	ReasonInternal Reason = "internal"
	// ReasonContainerNotFound: a container was named (--container-id, WithContainer) and not one process of it
	// could be identified from here, or the pid given is not one of its processes. Nothing was touched.
	ReasonContainerNotFound Reason = "container-not-found"
)

// Outcome is the overall result of one injection.
type Outcome string

// Outcomes reported in InjectResult.Status.
const (
	// OutcomeOK: the agent was loaded and its port answered.
	OutcomeOK Outcome = "ok"
	// OutcomeAlreadyInjected: the agent had been loaded before and its port listens; nothing was done. It is a
	// success.
	OutcomeAlreadyInjected Outcome = "already-injected"
	// OutcomeUnchanged: reconfigure found the agent's config file already holding the new bytes and left it as
	// it was. It is a success.
	OutcomeUnchanged Outcome = "unchanged"
	// OutcomeError: the injection failed; Reason and Message say why.
	OutcomeError Outcome = "error"
)

// InjectResult is the machine-readable result of injecting the agent into one JVM. `jmx-attach inject` prints
// one per JVM as a single JSON line, and the operator reads it back with ParseInjectResult.
type InjectResult struct {
	// PID is the JVM's pid in the injector's PID namespace.
	PID int `json:"pid"`
	// NSPID is the JVM's pid in its own PID namespace, as the container sees it.
	NSPID int `json:"nspid,omitempty"`
	// MainClass is the JVM's main class or jar, when known.
	MainClass string `json:"mainClass,omitempty"`
	// Status is the outcome.
	Status Outcome `json:"status"`
	// Reason classifies a failure; empty on success.
	Reason Reason `json:"reason,omitempty"`
	// Message is a human-readable explanation.
	Message string `json:"message,omitempty"`
	// Host and Port are where the agent serves metrics, in the JVM's network namespace.
	Host string `json:"host,omitempty"`
	Port int    `json:"port"`
	// AgentPath and ConfigPath are the agent jar and config as the JVM sees them (inside its container).
	AgentPath  string `json:"agentPath,omitempty"`
	ConfigPath string `json:"configPath,omitempty"`
	// JavaVersion is the JVM's version, when known.
	JavaVersion string `json:"javaVersion,omitempty"`
	// StartedAt is when the JVM process started (from its start time in /proc/<pid>/stat and the boot time in
	// /proc/stat, to the clock tick), when known. With PID it identifies the process.
	StartedAt time.Time `json:"startedAt,omitzero"`
	// Note is an optional remark on a result, such as a reconfiguration whose httpServer section takes effect
	// only at the JVM's next start.
	Note string `json:"note,omitempty"`
}

// OK reports whether the result is a success (ok, already-injected or unchanged).
func (r InjectResult) OK() bool {
	return r.Status == OutcomeOK || r.Status == OutcomeAlreadyInjected || r.Status == OutcomeUnchanged
}

// MarshalLine encodes r as one line of JSON, without the trailing newline.
func (r InjectResult) MarshalLine() ([]byte, error) {
	return json.Marshal(r)
}

// ParseInjectResult decodes one result line written by MarshalLine (surrounding white space is ignored). It
// rejects unknown fields, unknown outcomes and an error without a reason, so a changed producer is noticed.
func ParseInjectResult(line []byte) (InjectResult, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return InjectResult{}, errors.New("parse inject result: empty line")
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var r InjectResult
	if err := dec.Decode(&r); err != nil {
		return InjectResult{}, fmt.Errorf("parse inject result: %w", err)
	}
	if dec.More() {
		return InjectResult{}, errors.New("parse inject result: trailing data after the JSON object")
	}
	switch r.Status {
	case OutcomeOK, OutcomeAlreadyInjected, OutcomeUnchanged:
	case OutcomeError:
		if r.Reason == "" {
			return InjectResult{}, errors.New("parse inject result: error without a reason")
		}
	default:
		return InjectResult{}, fmt.Errorf("parse inject result: unknown status %q", r.Status)
	}
	if r.PID == 0 && (r.Reason == ReasonTruncated || r.Reason == ReasonContainerNotFound) {
		// The summary line of a termination log that did not hold every result, or the one line of a run that
		// found no process of its container.
		return r, nil
	}
	if r.PID <= 0 {
		return InjectResult{}, fmt.Errorf("parse inject result: invalid pid %d", r.PID)
	}
	if r.Port < 0 || r.Port > 65535 {
		return InjectResult{}, fmt.Errorf("parse inject result: invalid port %d", r.Port)
	}
	return r, nil
}
