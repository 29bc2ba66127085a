package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/handlerkit/handlerkit/pkg/jvm"
)

// selfExe is the program run again for a JVM of another user. /proc/self/exe reaches this very binary without
// its path: the Exec strategy stages jmx-attach in a directory only the container's user may enter.
const selfExe = "/proc/self/exe"

// childFlags are the flags of this run that a run as another user repeats (pairs of flag and value).
type childFlags []string

// run returns the jvm.UserRunner of this run: jmx-attach runs itself again as the JVM's uid and gid, with no
// supplementary groups, for that one JVM (--pid), with the jar and config on stdin (--bundle-stdin) and its
// result as a JSON line on stdout. The kernel clears the capabilities of a root process that changes all its
// uids to a non-root one, so the process it starts has the JVM's credentials and no capability; starting it
// needs CAP_SETUID and CAP_SETGID (and CAP_SETGID for the groups), nothing else.
func (f childFlags) run(stderr io.Writer) jvm.UserRunner {
	return func(ctx context.Context, req jvm.UserRequest) jvm.InjectResult {
		res := jvm.InjectResult{PID: req.JVM.PID, Port: req.Agent.Port, Host: req.Agent.Host}
		fail := func(reason jvm.Reason, msg string) jvm.InjectResult {
			res.Status, res.Reason, res.Message = jvm.OutcomeError, reason, msg
			return res
		}
		args := []string{"inject"}
		jar := req.Jar
		if req.Reconfigure {
			args, jar = []string{"reconfigure"}, nil
		}
		args = append(args, "--bundle-stdin", "--pid", strconv.Itoa(req.JVM.PID), "--json", "--termination-log", "")
		if !req.Reconfigure {
			args = append(args, "--port", strconv.Itoa(req.Agent.Port))
			if req.Agent.Host != "" {
				args = append(args, "--host", req.Agent.Host)
			}
		}
		for i := 0; i+1 < len(f); i += 2 {
			if f[i+1] != "" {
				args = append(args, f[i], f[i+1])
			}
		}
		var stdin bytes.Buffer
		if err := jvm.WriteBundle(&stdin, jar, req.Config); err != nil {
			return fail(jvm.ReasonInternal, fmt.Sprintf("bundle for uid %d: %v", req.User.UID, err))
		}
		cmd := exec.CommandContext(ctx, selfExe, args...)
		cmd.Stdin = &stdin
		var stdout bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: uint32(req.User.UID), Gid: uint32(req.User.GID), Groups: []uint32{}},
			Pdeathsig:  syscall.SIGKILL,
		}
		err := cmd.Run()
		var exitErr *exec.ExitError
		if err != nil && !errors.As(err, &exitErr) {
			if errors.Is(err, syscall.EPERM) {
				return fail(jvm.ReasonAccessDenied, fmt.Sprintf(
					"pid %d runs as uid %d; jmx-attach runs as root and cannot act as that user (%v): it needs CAP_SETUID and CAP_SETGID for a JVM of another user, and is never given more; the JVM was not touched",
					req.JVM.PID, req.User.UID, err))
			}
			return fail(jvm.ReasonInternal, fmt.Sprintf("run jmx-attach as uid %d for pid %d: %v", req.User.UID, req.JVM.PID, err))
		}
		for _, line := range bytes.Split(stdout.Bytes(), []byte("\n")) {
			if r, perr := jvm.ParseInjectResult(line); perr == nil {
				return r
			}
		}
		return fail(jvm.ReasonInternal, fmt.Sprintf("jmx-attach as uid %d for pid %d reported no result (%v): %s", req.User.UID, req.JVM.PID, err,
			bytes.TrimSpace(stdout.Bytes())))
	}
}
