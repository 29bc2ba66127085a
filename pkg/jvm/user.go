package jvm

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// User is a JVM's user: the one uid and gid its process runs with (real, effective, saved and filesystem ids
// alike).
type User struct {
	UID, GID int
}

// UserRequest is one JVM that an Injector running as root hands to a UserRunner, because the JVM runs as
// another, non-root user.
type UserRequest struct {
	// Reconfigure is true for Reconfigure, false for Inject.
	Reconfigure bool
	// JVM is the JVM, as inspected; User its user.
	JVM  JVM
	User User
	// Agent is what Inject was asked to load (Port and Host are the ones this JVM gets); Jar and Config are the
	// agent jar and exporter config as read and checked by the Injector (Jar is nil for Reconfigure).
	Agent       Agent
	Jar, Config []byte
}

// UserRunner injects into (or reconfigures) one JVM as the JVM's own user, in a process of that user, and
// returns its result. jmx-attach runs itself again with the JVM's uid and gid (syscall.Credential), which needs
// only CAP_SETUID and CAP_SETGID: the process it starts has the JVM's credentials and no capability, so the
// kernel lets it read the JVM's /proc entries, its copies belong to the JVM's user from the start, and it
// signals and connects to the JVM as its owner. Root then needs neither CAP_SYS_PTRACE (for the /proc entries
// of another user's process) nor CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_FOWNER or CAP_KILL.
type UserRunner func(ctx context.Context, req UserRequest) InjectResult

// WithUserRunner makes an Injector that runs as root hand every JVM of another, non-root user to run (Inject
// and Reconfigure, after the JVM was inspected and the jar and config checked). Default: none, and root handles
// such a JVM itself, which needs CAP_SYS_PTRACE (or the fsuid switch Inspect does), CAP_CHOWN, CAP_KILL,
// CAP_SETUID and CAP_SETGID.
func WithUserRunner(run UserRunner) Option {
	return func(in *Injector) error {
		in.asUser = run
		return nil
	}
}

// soleUser returns the user of a process whose real, effective, saved and filesystem uids are one non-root uid
// and whose gids are one gid; ok is false for root and for a process with mixed ids (a set-user-id program),
// which only root with capabilities can reach.
func soleUser(st Status) (User, bool) {
	u, g := st.UID[0], st.GID[0]
	for i := 1; i < 4; i++ {
		if st.UID[i] != u || st.GID[i] != g {
			return User{}, false
		}
	}
	if u == 0 {
		return User{}, false
	}
	return User{UID: u, GID: g}, true
}

// otherUser reports whether JVM j is to be handed to the UserRunner: this process is root, has a runner, and j
// runs as one non-root user.
func (in *Injector) otherUser(j JVM) (User, bool) {
	if in.asUser == nil || os.Geteuid() != 0 {
		return User{}, false
	}
	st, err := readStatus(j.PID)
	if err != nil {
		return User{}, false
	}
	return soleUser(st)
}

// runAsUser hands req to the UserRunner and keeps what this process knows of the JVM in the result.
func (in *Injector) runAsUser(ctx context.Context, req UserRequest, res InjectResult) InjectResult {
	r := in.asUser(ctx, req)
	r.PID = res.PID
	if r.NSPID == 0 {
		r.NSPID = res.NSPID
	}
	if r.MainClass == "" {
		r.MainClass = res.MainClass
	}
	if r.JavaVersion == "" {
		r.JavaVersion = res.JavaVersion
	}
	if r.StartedAt.IsZero() {
		r.StartedAt = res.StartedAt
	}
	if r.Status == "" {
		r.Status, r.Reason = OutcomeError, ReasonInternal
		r.Message = fmt.Sprintf("pid %d: the process acting as uid %d reported no result", res.PID, req.User.UID)
	}
	return r
}

// asProcessFSUser runs fn on an OS thread whose filesystem uid and gid are those of process pid, when this
// process is root and pid runs as one non-root user (see soleUser); otherwise fn runs as it is. The kernel
// checks access to another process's /proc entries (maps, environ, root, cwd, ns) with the reader's filesystem
// ids and effective capabilities: with the target's fsuid and fsgid, and no capability the target lacks (a
// non-root process has none), root reads them without CAP_SYS_PTRACE. setfsuid and setfsgid change only the
// calling thread and need CAP_SETUID and CAP_SETGID; without them the thread keeps root's ids and fn is run
// anyway (it then fails, or succeeds with CAP_SYS_PTRACE). The thread is given back to the scheduler only when
// its ids are verified restored; otherwise it ends with its goroutine.
func asProcessFSUser(pid int, fn func() error) error {
	if os.Geteuid() != 0 {
		return fn()
	}
	st, err := readStatus(pid)
	if err != nil {
		return fn()
	}
	u, ok := soleUser(st)
	if !ok {
		return fn()
	}
	return asFSUser(u, fn)
}

// asFSUser runs fn on an OS thread whose filesystem uid and gid are u's (see asProcessFSUser).
func asFSUser(u User, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		_, _ = unix.SetfsgidRetGid(u.GID)
		_, _ = unix.SetfsuidRetUid(u.UID)
		err := fn()
		_, _ = unix.SetfsuidRetUid(os.Geteuid())
		_, _ = unix.SetfsgidRetGid(os.Getegid())
		// An invalid id changes nothing and returns the current one.
		fsuid, _ := unix.SetfsuidRetUid(-1)
		fsgid, _ := unix.SetfsgidRetGid(-1)
		if fsuid == os.Geteuid() && fsgid == os.Getegid() {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}
