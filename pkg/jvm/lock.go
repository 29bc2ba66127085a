package jvm

import (
	"context"
	"fmt"
	"os"
	"path"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// lockSuffix ends the name of the per-JVM lock file, /tmp/.handlerkit-jmx-agent-<nspid>-<start>.lock in the
// JVM's filesystem, beside the marker.
const lockSuffix = ".lock"

// lockFileMode keeps the lock file to its owner: whoever can open it can flock it, and so hold off every
// injection of the JVM.
const lockFileMode = 0o600

// lockReplacedTries bounds the retries when the lock file is replaced while it is being locked.
const lockReplacedTries = 3

// jvmLock is an exclusive flock on a JVM's lock file. Two jmx-attach processes that inject into (or
// reconfigure) one JVM at the same time, such as two operator replicas, or an operator restarted while its exec
// still runs, take it in turn, so the marker check and the marker write of one never interleave with the
// other's and the agent is never loaded twice.
type jvmLock struct {
	fd int
}

// lockPath names the lock file of JVM j after its nspid and its start time in clock ticks after boot, so that a
// file left by an earlier process with the same nspid (of another user, say, in a /tmp shared with the host)
// is never taken for this process's lock.
func lockPath(j JVM) string {
	return "/tmp/" + markerPrefix + strconv.Itoa(j.NSPID) + "-" + strconv.FormatUint(j.StartTicks, 10) + lockSuffix
}

// lockJVM takes the lock of JVM j, waiting up to wait (or until ctx ends) while another process holds it. The
// lock file lives in the JVM's /tmp, reached through /proc/<pid>/root like the marker. Anyone can create files
// there, so it is only used when it is a regular file with one link, owned by root, the JVM's user or this
// process's user, and with no access for group or others (who could otherwise flock it and hold off every
// injection). A file that fails these checks, one that cannot be opened, and one that is replaced while it is
// being locked, fail with ReasonLockFailed: nothing is loaded, and the message says why. The file is created
// with mode 0600 and given to the JVM's filesystem user, so that a jmx-attach running as that user (pods/exec)
// can lock it too; it is not removed afterwards, since removing a lock file lets two processes lock two
// different files.
func lockJVM(ctx context.Context, j JVM, wait time.Duration) (*jvmLock, error) {
	p := lockPath(j)
	fail := func(format string, args ...any) (*jvmLock, error) {
		return nil, &AttachError{Reason: ReasonLockFailed, Msg: fmt.Sprintf("lock %s of pid %d: ", p, j.PID) + fmt.Sprintf(format, args...)}
	}
	root, err := openTargetRoot(j.PID)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	tmp, err := root.open(path.Dir(p), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return fail("open the JVM's /tmp: %v", err)
	}
	defer unix.Close(tmp)
	name := path.Base(p)
	deadline := time.Now().Add(wait)
	for try := 0; ; try++ {
		fd, err := openLockFile(tmp, name)
		if err != nil {
			return fail("open: %v (a file another user created there?)", err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return fail("stat: %v", err)
		}
		uid := int(st.Uid)
		switch {
		case st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1:
			unix.Close(fd)
			return fail("not a regular file with one link (mode %o, %d links); refusing to use it", st.Mode, st.Nlink)
		case uid != 0 && uid != j.FSUID && uid != os.Geteuid():
			unix.Close(fd)
			return fail("owned by uid %d, neither root nor the JVM's user; refusing to use it", uid)
		case st.Mode&0o077 != 0:
			unix.Close(fd)
			return fail("group or others have access (mode %o), so another user could hold it; refusing to use it", st.Mode&0o7777)
		}
		if uid != j.FSUID && os.Geteuid() == 0 {
			// Best effort: the JVM's user, injecting through pods/exec, can then take the lock as well.
			_ = unix.Fchown(fd, j.FSUID, j.FSGID)
		}
		if err := flockWait(ctx, fd, deadline); err != nil {
			unix.Close(fd)
			return fail("%v", err)
		}
		// The file locked must still be the one at the path: another process may have replaced it meanwhile.
		var now unix.Stat_t
		if err := unix.Fstatat(tmp, name, &now, unix.AT_SYMLINK_NOFOLLOW); err == nil && now.Dev == st.Dev && now.Ino == st.Ino {
			return &jvmLock{fd: fd}, nil
		}
		unix.Close(fd)
		if try+1 >= lockReplacedTries {
			return fail("the file was replaced while it was being locked, %d times; refusing to go on", lockReplacedTries)
		}
	}
}

// openLockFile opens dir/name, creating it when there is none. An existing file is opened without O_CREAT:
// with fs.protected_regular set, O_CREAT on a file that another user owns in a sticky directory fails even for
// root, and the lock file belongs to the JVM's user.
func openLockFile(dir int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	for range lockReplacedTries {
		fd, err := unix.Openat(dir, name, flags, 0)
		if err != unix.ENOENT {
			return fd, err
		}
		fd, err = unix.Openat(dir, name, flags|unix.O_CREAT|unix.O_EXCL, lockFileMode)
		if err != unix.EEXIST {
			return fd, err
		}
	}
	return -1, unix.EEXIST
}

// flockWait takes an exclusive flock on fd, polling with backoff until deadline or ctx ends.
func flockWait(ctx context.Context, fd int, deadline time.Time) error {
	delay := 10 * time.Millisecond
	start := time.Now()
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			return fmt.Errorf("flock: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("another jmx-attach has held it for %s", time.Since(start).Round(time.Millisecond))
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for another jmx-attach to release it: %w", ctx.Err())
		case <-t.C:
		}
		delay = min(delay*2, 250*time.Millisecond)
	}
}

// unlock releases the lock; it may be called more than once.
func (l *jvmLock) unlock() {
	if l != nil && l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}
