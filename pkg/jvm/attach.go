package jvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxArgLength is the longest argument, in bytes, the HotSpot attach listener accepts (arg_length_max).
const MaxArgLength = 1024

// protocolVersion is the attach protocol version every HotSpot from JDK 6 on understands.
const protocolVersion = "1"

// attachArgs is how many arguments a version 1 request carries after the command; missing ones are empty.
const attachArgs = 3

// maxReplySize bounds what is read from the attach socket.
const maxReplySize = 1 << 20

// replyTimeout bounds one attach conversation when the context has no earlier deadline.
const replyTimeout = 2 * time.Minute

// encodeRequest builds a version 1 attach request: "1", the command and exactly three arguments, each
// terminated by NUL. It rejects an argument longer than MaxArgLength or containing NUL.
func encodeRequest(cmd string, args ...string) ([]byte, error) {
	if len(args) > attachArgs {
		return nil, fmt.Errorf("attach request: %d arguments, at most %d", len(args), attachArgs)
	}
	if cmd == "" {
		return nil, errors.New("attach request: empty command")
	}
	all := append([]string{cmd}, args...)
	for len(all) < attachArgs+1 {
		all = append(all, "")
	}
	var b []byte
	b = append(b, protocolVersion...)
	b = append(b, 0)
	for _, a := range all {
		if len(a) > MaxArgLength {
			return nil, &AttachError{Reason: ReasonArgsTooLong,
				Msg: fmt.Sprintf("attach argument is %d bytes, the JVM accepts at most %d", len(a), MaxArgLength)}
		}
		if strings.IndexByte(a, 0) >= 0 {
			return nil, &AttachError{Reason: ReasonInvalidRequest, Msg: "attach argument contains a NUL byte"}
		}
		b = append(b, a...)
		b = append(b, 0)
	}
	return b, nil
}

// attacher runs one attach conversation with one JVM.
type attacher struct {
	jvm           JVM
	attachTimeout time.Duration
}

// pidfd opens a pidfd for the JVM and checks that the pid still names the same process (same start
// time), so that a signal sent through the pidfd cannot hit a process that reused the pid.
func (a *attacher) pidfd() (int, error) {
	fd, err := unix.PidfdOpen(a.jvm.PID, 0)
	if err != nil {
		if err == unix.ESRCH {
			return -1, &AttachError{Reason: ReasonProcessGone, Msg: fmt.Sprintf("pid %d is gone", a.jvm.PID), Err: ErrProcessGone}
		}
		return -1, fmt.Errorf("pidfd_open %d: %w", a.jvm.PID, err)
	}
	st, err := readStat(a.jvm.PID)
	if err != nil || st.StartTicks != a.jvm.StartTicks {
		unix.Close(fd)
		return -1, &AttachError{Reason: ReasonProcessGone,
			Msg: fmt.Sprintf("pid %d no longer names the inspected JVM", a.jvm.PID), Err: ErrProcessGone}
	}
	return fd, nil
}

// sendQuit signals the JVM with SIGQUIT through a verified pidfd, after checking once more that it handles
// SIGQUIT: a process without a handler is terminated by it.
func (a *attacher) sendQuit() error {
	fd, err := a.pidfd()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := a.checkQuitHandled(); err != nil {
		return err
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGQUIT, nil, 0); err != nil {
		return &AttachError{Reason: ReasonProcessGone, Msg: "send SIGQUIT", Err: err}
	}
	return nil
}

// execute sends one command to the JVM's attach listener, starting the listener first when needed, and
// returns the raw reply. sent reports whether the whole request reached the JVM, after which the JVM may have
// acted on it even when no reply came back.
func (a *attacher) execute(ctx context.Context, cmd string, args ...string) (reply []byte, sent bool, err error) {
	req, err := encodeRequest(cmd, args...)
	if err != nil {
		return nil, false, err
	}
	conn, err := a.connect(ctx)
	if err != nil {
		return nil, false, err
	}
	defer conn.Close()
	// The JVM answers once agentmain returned; a hung agent must not hang the caller forever.
	dl := time.Now().Add(replyTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = conn.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if _, err := conn.Write(req); err != nil {
		if gone := a.goneError(); gone != nil {
			return nil, false, gone
		}
		return nil, false, &AttachError{Reason: ReasonConnectFailed, Msg: "send attach request", Err: err}
	}
	reply, err = io.ReadAll(io.LimitReader(conn, maxReplySize))
	if err != nil || len(reply) == 0 {
		// A JVM that exits while it runs the command (an agent calling System.exit) closes the connection
		// without a word; so does a listener that rejects the peer's credentials. Only /proc tells them apart.
		if gone := a.goneError(); gone != nil {
			return nil, true, gone
		}
	}
	if err != nil {
		return nil, true, &AttachError{Reason: ReasonConnectFailed, Msg: "read attach reply", Err: err}
	}
	if len(reply) == 0 {
		return nil, true, &AttachError{Reason: ReasonConnectFailed, Msg: fmt.Sprintf(
			"pid %d is running but closed the attach connection without a reply (peer credential check failed?)", a.jvm.PID)}
	}
	return reply, true, nil
}

// processGoneGrace is how long a JVM that dropped the attach connection is given to finish exiting before it is
// taken to be alive.
const processGoneGrace = time.Second

// goneError waits up to processGoneGrace for the JVM to end and returns a process-gone error that says how it
// ended, when /proc still tells, or nil when the JVM is still running.
func (a *attacher) goneError() error {
	deadline := time.Now().Add(processGoneGrace)
	for {
		st, err := readStat(a.jvm.PID)
		switch {
		case err != nil || st.StartTicks != a.jvm.StartTicks:
			return &AttachError{Reason: ReasonProcessGone,
				Msg: fmt.Sprintf("pid %d ended during the attach conversation", a.jvm.PID), Err: ErrProcessGone}
		case st.State == 'Z' || st.State == 'X':
			msg := fmt.Sprintf("pid %d ended during the attach conversation", a.jvm.PID)
			if hint := st.ExitHint(); hint != "" {
				msg += " (" + hint + ")"
			}
			return &AttachError{Reason: ReasonProcessGone, Msg: msg, Err: ErrProcessGone}
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// connect connects to the JVM's attach listener, starting it with the trigger file and SIGQUIT when it is not
// running yet.
func (a *attacher) connect(ctx context.Context) (net.Conn, error) {
	root, err := openTargetRoot(a.jvm.PID)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	sockName := ".java_pid" + strconv.Itoa(a.jvm.NSPID)
	sockPath := path.Join("/tmp", sockName)

	// A listener started by an earlier attach is reused without a signal. A socket file nobody listens on is
	// left over from an earlier process with the same nspid (a /tmp that outlived its container); it is removed
	// and the listener started afresh.
	var conn net.Conn
	sock, err := a.openSocket(root, sockPath)
	if err == nil {
		conn, err = connectAs(fmt.Sprintf("/proc/self/fd/%d", sock), a.jvm.UID, a.jvm.GID)
		unix.Close(sock)
		if errors.Is(err, unix.ECONNREFUSED) {
			_ = root.remove(sockPath)
		}
	}
	if conn == nil {
		if err := a.checkSignalSafe(); err != nil {
			return nil, err
		}
		sock, err = a.waitSocket(ctx, root, sockPath)
		if err != nil {
			return nil, err
		}
		conn, err = connectAs(fmt.Sprintf("/proc/self/fd/%d", sock), a.jvm.UID, a.jvm.GID)
		unix.Close(sock)
	}
	if err != nil {
		return nil, &AttachError{Reason: ReasonConnectFailed,
			Msg: fmt.Sprintf("connect to %s of pid %d as %d:%d", sockPath, a.jvm.PID, a.jvm.UID, a.jvm.GID), Err: err}
	}
	return conn, nil
}

// openSocket opens the attach socket file as O_PATH after checking that it is a socket owned by the JVM's
// effective uid (or root), so a planted file or symbolic link is never connected to.
func (a *attacher) openSocket(root *targetRoot, p string) (int, error) {
	fd, err := root.open(p, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		return -1, fmt.Errorf("%s is not a socket", p)
	}
	if int(st.Uid) != a.jvm.UID && st.Uid != 0 {
		unix.Close(fd)
		return -1, fmt.Errorf("%s is owned by uid %d, not the JVM's uid %d", p, st.Uid, a.jvm.UID)
	}
	return fd, nil
}

// checkSignalSafe refuses, before any trigger file is created, a JVM that disabled attach or dynamic agent
// loading, or that SIGQUIT would kill.
func (a *attacher) checkSignalSafe() error {
	if err := checkAttachAllowed(a.jvm); err != nil {
		return err
	}
	// Fail before creating anything when SIGQUIT would kill the JVM.
	return a.checkQuitHandled()
}

// checkListenerReachable refuses, before anything is copied, a JVM that has no running attach listener and no
// SIGQUIT handler: its listener cannot be started without killing it. An -Xrs JVM starts its listener at
// startup and passes, as long as its socket is there.
func (a *attacher) checkListenerReachable() error {
	root, err := openTargetRoot(a.jvm.PID)
	if err != nil {
		return err
	}
	defer root.Close()
	if fd, err := a.openSocket(root, path.Join("/tmp", ".java_pid"+strconv.Itoa(a.jvm.NSPID))); err == nil {
		unix.Close(fd)
		return nil
	}
	return a.checkQuitHandled()
}

// checkQuitHandled refuses a JVM that has no SIGQUIT handler: the signal would terminate it.
func (a *attacher) checkQuitHandled() error {
	st, err := readStatus(a.jvm.PID)
	if err != nil {
		return &AttachError{Reason: ReasonProcessGone, Msg: "read status", Err: err}
	}
	if !st.CatchesSignal(int(unix.SIGQUIT)) {
		return &AttachError{Reason: ReasonSignalNotHandled, Msg: fmt.Sprintf(
			"pid %d has no attach socket and does not handle SIGQUIT (an -Xrs JVM whose socket was removed, or one still starting); not signalled", a.jvm.PID)}
	}
	return nil
}

// waitSocket creates the trigger files, signals the JVM and polls for its attach socket with backoff until the
// attach timeout, signalling once more half way as the JDK's own client does. It removes the triggers.
func (a *attacher) waitSocket(ctx context.Context, root *targetRoot, sockPath string) (int, error) {
	removeTriggers, err := a.createTriggers(root)
	if err != nil {
		return -1, err
	}
	defer removeTriggers()
	if err := a.sendQuit(); err != nil {
		return -1, err
	}
	deadline := time.Now().Add(a.attachTimeout)
	resent := false
	delay := 20 * time.Millisecond
	for {
		if fd, err := a.openSocket(root, sockPath); err == nil {
			return fd, nil
		}
		if st, err := readStat(a.jvm.PID); err != nil || st.StartTicks != a.jvm.StartTicks || st.State == 'Z' {
			return -1, &AttachError{Reason: ReasonProcessGone, Msg: fmt.Sprintf("pid %d exited while attaching", a.jvm.PID), Err: ErrProcessGone}
		}
		now := time.Now()
		if now.After(deadline) {
			return -1, &AttachError{Reason: ReasonAttachTimeout, Msg: fmt.Sprintf(
				"pid %d did not open its attach socket %s within %s (attach disabled, or not a HotSpot JVM?)", a.jvm.PID, sockPath, a.attachTimeout)}
		}
		if !resent && now.After(deadline.Add(-a.attachTimeout/2)) {
			resent = true
			if err := a.sendQuit(); err != nil {
				return -1, err
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return -1, &AttachError{Reason: ReasonAttachTimeout, Msg: "waiting for the attach socket", Err: ctx.Err()}
		case <-t.C:
		}
		delay = min(delay*3/2, 500*time.Millisecond)
	}
}

// createTriggers creates .attach_pid<nspid> in the JVM's working directory and in its /tmp. HotSpot looks in the
// working directory first and falls back to /tmp; creating both covers a working directory the JVM's user
// cannot search. The files are given to the JVM's euid:egid because JDK 8 only accepts a trigger it owns.
func (a *attacher) createTriggers(root *targetRoot) (func(), error) {
	name := ".attach_pid" + strconv.Itoa(a.jvm.NSPID)
	var cleanups []func()
	cleanup := func() {
		for _, c := range cleanups {
			c()
		}
	}
	if cwd, err := unix.Open(path.Join(procRoot, strconv.Itoa(a.jvm.PID), "cwd"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		if createTrigger(cwd, name, a.jvm.UID, a.jvm.GID) {
			cleanups = append(cleanups, func() { _ = unix.Unlinkat(cwd, name, 0); unix.Close(cwd) })
		} else {
			unix.Close(cwd)
		}
	}
	tmp, err := root.open("/tmp", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		cleanup()
		if len(cleanups) == 0 {
			return nil, &AttachError{Reason: ReasonConnectFailed, Msg: "open the JVM's /tmp", Err: err}
		}
		return func() {}, nil
	}
	if createTrigger(tmp, name, a.jvm.UID, a.jvm.GID) {
		cleanups = append(cleanups, func() { _ = unix.Unlinkat(tmp, name, 0); unix.Close(tmp) })
	} else {
		unix.Close(tmp)
	}
	if len(cleanups) == 0 {
		return nil, &AttachError{Reason: ReasonConnectFailed, Msg: fmt.Sprintf("cannot create %s in the JVM's working directory or /tmp", name)}
	}
	return cleanup, nil
}

// createTrigger creates dir/name, reporting whether this call created it (an existing file is left alone, and
// not removed afterwards, because someone else is attaching).
func createTrigger(dirfd int, name string, uid, gid int) bool {
	fd, err := unix.Openat(dirfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return false
	}
	_ = unix.Fchown(fd, uid, gid)
	unix.Close(fd)
	return true
}

// connectAs connects a Unix stream socket to path with the effective uid and gid set to uid and gid, because
// the JVM checks the peer credentials of every connection. Go's syscall.Setresuid changes every thread of the
// process, so the credentials are changed with raw syscalls on one locked OS thread only. The thread keeps its
// original saved uid, which lets it switch back; it is returned to the scheduler only when its original
// credentials are verified restored. Otherwise it stays locked and the runtime discards it with the goroutine.
func connectAs(path string, uid, gid int) (net.Conn, error) {
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := connectAsOnThread(path, uid, gid)
		done <- result{fd, err}
	}()
	r := <-done
	if r.err != nil {
		return nil, r.err
	}
	f := os.NewFile(uintptr(r.fd), "attach-socket")
	defer f.Close()
	return net.FileConn(f)
}

// threadCreds are one thread's user and group ids.
type threadCreds struct {
	ruid, euid, suid int
	rgid, egid, sgid int
	groups           []int
}

func currentThreadCreds() (threadCreds, error) {
	var c threadCreds
	c.ruid, c.euid, c.suid = unix.Getresuid()
	c.rgid, c.egid, c.sgid = unix.Getresgid()
	groups, err := unix.Getgroups()
	if err != nil {
		return c, fmt.Errorf("getgroups: %w", err)
	}
	c.groups = groups
	return c, nil
}

// connectAsOnThread runs on a locked thread; it unlocks the thread only when it leaves it as it found it.
func connectAsOnThread(path string, uid, gid int) (int, error) {
	orig, err := currentThreadCreds()
	if err != nil {
		return -1, err
	}
	switched := uid != orig.euid || gid != orig.egid
	if switched {
		if err := setThreadCreds(-1, uid, uid, -1, gid, gid, []int{}); err != nil {
			return -1, err
		}
	}
	fd, connErr := dialUnix(path)
	if switched {
		if err := setThreadCreds(orig.ruid, orig.euid, orig.suid, orig.rgid, orig.egid, orig.sgid, orig.groups); err != nil {
			if fd >= 0 {
				unix.Close(fd)
			}
			return -1, fmt.Errorf("restore thread credentials: %w", err)
		}
		now, err := currentThreadCreds()
		if err != nil || now.euid != orig.euid || now.egid != orig.egid || now.ruid != orig.ruid || now.suid != orig.suid {
			if fd >= 0 {
				unix.Close(fd)
			}
			return -1, errors.New("restore thread credentials: not restored")
		}
	}
	runtime.UnlockOSThread()
	return fd, connErr
}

// setThreadCreds sets the calling thread's groups, then gids, then uids (or, when restoring to a privileged
// uid, the uids first so that the gids may be changed). -1 leaves an id unchanged. It uses raw syscalls, which
// affect only the calling thread.
func setThreadCreds(ruid, euid, suid, rgid, egid, sgid int, groups []int) error {
	setUIDs := func() error {
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(ruid), uintptr(euid), uintptr(suid)); e != 0 {
			return fmt.Errorf("setresuid %d %d %d: %w", ruid, euid, suid, e)
		}
		return nil
	}
	setGIDs := func() error {
		if groups != nil {
			var p uintptr
			gs := make([]uint32, len(groups))
			for i, g := range groups {
				gs[i] = uint32(g)
			}
			if len(gs) > 0 {
				p = uintptr(unsafe.Pointer(&gs[0]))
			}
			_, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, uintptr(len(gs)), p, 0)
			runtime.KeepAlive(gs)
			if e != 0 {
				return fmt.Errorf("setgroups: %w", e)
			}
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(rgid), uintptr(egid), uintptr(sgid)); e != 0 {
			return fmt.Errorf("setresgid %d %d %d: %w", rgid, egid, sgid, e)
		}
		return nil
	}
	if euid, _, _ := syscall.RawSyscall(syscall.SYS_GETEUID, 0, 0, 0); int(euid) == 0 {
		// Privileged now: change groups while still allowed, then drop the uid.
		if err := setGIDs(); err != nil {
			return err
		}
		return setUIDs()
	}
	// Unprivileged now (restoring): regain the uid through the saved uid first.
	if err := setUIDs(); err != nil {
		return err
	}
	return setGIDs()
}

func dialUnix(path string) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	for {
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: path})
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("connect: %w", err)
	}
	return fd, nil
}
