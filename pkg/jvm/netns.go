package jvm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// errNetnsDenied is returned (wrapped) when the network namespace of a target cannot be joined, which needs
// CAP_SYS_ADMIN.
var errNetnsDenied = errors.New("joining the network namespace was refused")

// sameNetns reports whether pid is in the network namespace of the calling thread (every thread that runs
// ordinary goroutines is in the process's own namespace: inNetns never returns a thread it moved).
func sameNetns(pid int) (bool, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var self, target unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &self); err != nil {
		return false, err
	}
	if err := statNetns(pid, &target); err != nil {
		return false, procErr(pid, err)
	}
	return self.Dev == target.Dev && self.Ino == target.Ino, nil
}

// inNetns runs fn in the network namespace of pid. In the common case, jmx-attach in the JVM's pod, that is this
// process's own namespace: fn runs on the calling goroutine and nothing is joined, so no capability is needed.
// Otherwise fn runs on a new goroutine locked to its OS thread, which joins the namespace (setns affects only
// the calling thread) and is never unlocked: when the goroutine ends the runtime terminates the thread instead
// of handing it, still in the target's namespace, to other goroutines. A socket keeps the namespace it was
// created in, so one created by fn works from any thread afterwards. Joining needs CAP_SYS_ADMIN; a refusal is
// returned wrapping errNetnsDenied and fn does not run.
func inNetns(pid int, fn func() error) error {
	same, err := sameNetns(pid)
	if err != nil {
		return err
	}
	if same {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread ends with the goroutine
		if err := joinNetns(pid); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	return <-done
}

// joinNetns moves the calling (locked) thread into the network namespace of pid and checks that it arrived.
func joinNetns(pid int) error {
	nsPath := path.Join(procRoot, strconv.Itoa(pid), "ns", "net")
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return procErr(pid, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("%w (setns needs CAP_SYS_ADMIN: %v)", errNetnsDenied, err)
		}
		return fmt.Errorf("setns into the network namespace of pid %d: %w", pid, err)
	}
	var want, now unix.Stat_t
	if err := unix.Fstat(fd, &want); err != nil {
		return err
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &now); err != nil {
		return err
	}
	if want.Dev != now.Dev || want.Ino != now.Ino {
		return fmt.Errorf("setns into the network namespace of pid %d: thread is not in it", pid)
	}
	return nil
}

// statNetns stats the network namespace of pid, as its own user when this process is root (asProcessFSUser).
func statNetns(pid int, st *unix.Stat_t) error {
	return asProcessFSUser(pid, func() error {
		return unix.Stat(path.Join(procRoot, strconv.Itoa(pid), "ns", "net"), st)
	})
}

// netnsID identifies a network namespace.
type netnsID struct{ dev, ino uint64 }

// netnsOf returns the identity of the network namespace of pid.
func netnsOf(pid int) (netnsID, error) {
	var st unix.Stat_t
	if err := statNetns(pid, &st); err != nil {
		return netnsID{}, procErr(pid, err)
	}
	return netnsID{dev: st.Dev, ino: st.Ino}, nil
}

// dialInNetns dials addr over TCP from the network namespace of pid.
func dialInNetns(ctx context.Context, pid int, addr string) (net.Conn, error) {
	var conn net.Conn
	err := inNetns(pid, func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		conn = c
		return err
	})
	return conn, err
}
