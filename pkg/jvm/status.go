package jvm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// AgentStatusFile is the name of the file in which the project's agent reports its state, in the directory of
// its config file (the copies' directory). jmx_exporter's own agent writes none.
const AgentStatusFile = "agent-status.json"

// MaxAgentStatusSize is the largest status file read: 16 KiB.
const MaxAgentStatusSize = 16 << 10

// States of AgentStatus.State.
const (
	// AgentServing: the agent serves metrics with the config whose digest is ConfigSHA256.
	AgentServing = "serving"
	// AgentRefused: the agent refused to start; Reason and Message say why.
	AgentRefused = "refused"
)

// AgentStatus is what the project's agent reports in AgentStatusFile, written by the JVM (a temporary file
// renamed over it) before agentmain returns and after every reload attempt.
type AgentStatus struct {
	// Version is the format's version, 1.
	Version int `json:"version"`
	// Agent names the agent and the jmx_exporter collector it embeds.
	Agent string `json:"agent"`
	// State is AgentServing or AgentRefused.
	State string `json:"state"`
	// Reason is a Reason value when the agent refused to start (config-invalid, agent-already-present,
	// port-in-use, port-not-permitted, internal).
	Reason string `json:"reason"`
	// Message is the collector's or the JVM's own message.
	Message string `json:"message"`
	// ConfigSHA256 is the hex SHA-256 of the config bytes in force (serving) or attempted (refused).
	ConfigSHA256 string `json:"configSHA256"`
	// Host and Port are where the agent serves.
	Host string `json:"host"`
	Port int    `json:"port"`
	// RestartRequired is set when a reload changed something that takes effect only at the JVM's next start
	// (the httpServer section).
	RestartRequired string `json:"restartRequired"`
	// Reload is the outcome of the last reload attempt; nil before the first.
	Reload *AgentReload `json:"reload,omitempty"`
}

// AgentReload is the outcome of the agent's last attempt to reload its config file.
type AgentReload struct {
	// ConfigSHA256 is the hex SHA-256 of the bytes last attempted.
	ConfigSHA256 string `json:"configSHA256"`
	// OK reports whether they were taken into use; when false the agent kept its config.
	OK bool `json:"ok"`
	// Message is the collector's message on a refused reload.
	Message string `json:"message"`
}

// configDigest returns the hex SHA-256 of config, as the agent reports it.
func configDigest(config []byte) string {
	sum := sha256.Sum256(config)
	return hex.EncodeToString(sum[:])
}

// readAgentStatus reads AgentStatusFile in the copies' directory dirfd (dir names it in errors), written by
// the JVM whose filesystem uid is uid. found is false when there is none (an agent that writes no status). The
// file must be a regular file (not a symbolic link) owned by the JVM's user or root, of at most
// MaxAgentStatusSize bytes, holding a status of version 1 in a known state.
func readAgentStatus(dirfd int, dir string, uid int) (st AgentStatus, found bool, err error) {
	p := path.Join(dir, AgentStatusFile)
	fd, err := unix.Openat(dirfd, AgentStatusFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return AgentStatus{}, false, nil
	}
	if err != nil {
		return AgentStatus{}, false, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil {
		return AgentStatus{}, true, err
	}
	switch {
	case fst.Mode&unix.S_IFMT != unix.S_IFREG:
		return AgentStatus{}, true, fmt.Errorf("%s is not a regular file", p)
	case int(fst.Uid) != uid && fst.Uid != 0:
		return AgentStatus{}, true, fmt.Errorf("%s is owned by uid %d, neither the JVM's user nor root", p, fst.Uid)
	case fst.Size > MaxAgentStatusSize:
		return AgentStatus{}, true, fmt.Errorf("%s is %d bytes, at most %d", p, fst.Size, MaxAgentStatusSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxAgentStatusSize+1))
	if err != nil {
		return AgentStatus{}, true, fmt.Errorf("read %s: %w", p, err)
	}
	if len(data) > MaxAgentStatusSize {
		return AgentStatus{}, true, fmt.Errorf("%s is over %d bytes", p, MaxAgentStatusSize)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return AgentStatus{}, true, fmt.Errorf("%s: %w", p, err)
	}
	if st.Version != 1 || (st.State != AgentServing && st.State != AgentRefused) {
		return AgentStatus{}, true, fmt.Errorf("%s: unknown version %d or state %q", p, st.Version, st.State)
	}
	return st, true, nil
}

// AgentRefusalReason is the Reason of an agent's refusal, from the reason the agent gives for it (in its status
// file, and in its line on the JVM's stderr: "refused: <reason>: <message>"): the agent's reasons that are Reasons
// here keep their name, any other (jdk-tool, a reason of a later agent) is ReasonAgentStartFailed.
func AgentRefusalReason(agentReason string) Reason {
	switch r := Reason(agentReason); r {
	case ReasonConfigInvalid, ReasonAgentAlreadyPresent, ReasonPortInUse, ReasonPortNotPermitted, ReasonJVMUnsupported,
		ReasonInternal:
		return r
	}
	return ReasonAgentStartFailed
}

// refusalError turns the status of an agent that refused to start into an error with its reason and message.
func refusalError(pid int, st AgentStatus) error {
	reason := AgentRefusalReason(st.Reason)
	msg := st.Message
	if msg == "" {
		msg = "no message"
	}
	return &AttachError{Reason: reason, Msg: fmt.Sprintf("the agent in pid %d refused to start (%s): %s", pid, st.Reason, msg)}
}
