package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// A terminal sends Ctrl-C's SIGINT to its whole foreground process group:
// under `make demo` that is make as well as the demo. GNU make, having
// received SIGINT, waits for the demo's clean stop and then re-raises SIGINT
// on itself, so the shell sees status 130 however cleanly the demo stopped.
//
// So, when its stdin is its controlling terminal and it runs in the
// foreground in someone else's process group (make's), the demo moves into a
// process group of its own and makes that group the terminal's foreground
// group: Ctrl-C then reaches only the demo (and the children it started in
// its group), make sees its child exit 0, and exits 0. Before exiting, the
// demo gives the terminal back to the group it took it from, so that make and
// then the shell have it again.

// foreground is the terminal the demo took; the zero value took nothing.
type foreground struct {
	fd       int // the terminal (stdin)
	previous int // the foreground process group before the demo took it
	own      int // the demo's own process group
	tstp     chan os.Signal
	done     chan struct{}
}

// takeForeground moves the demo into a process group of its own and makes
// it the terminal's foreground group, when stdin is the demo's controlling
// terminal and the demo is in the foreground in another process's group.
// Otherwise it does nothing (no terminal, a background job, or a group of
// the demo's own already, as when a shell runs it directly). Call restore
// before exiting, on every path.
func takeForeground() (*foreground, error) {
	fd := int(os.Stdin.Fd())
	fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil {
		// Not a terminal, or not the demo's controlling terminal.
		return &foreground{}, nil
	}
	pid, pgrp := unix.Getpid(), unix.Getpgrp()
	if pgrp != fg || pgrp == pid {
		return &foreground{}, nil
	}
	if err := unix.Setpgid(0, 0); err != nil {
		return &foreground{}, fmt.Errorf("a process group of its own: %w", err)
	}
	f := &foreground{fd: fd, previous: fg, own: pid}
	if err := f.setForeground(pid); err != nil {
		// Back to make's group, which still has the terminal.
		if err2 := unix.Setpgid(0, fg); err2 != nil {
			err = errors.Join(err, err2)
		}
		return &foreground{}, fmt.Errorf("the terminal's foreground: %w", err)
	}
	// Ctrl-Z would stop the demo's group while make, which is not stopped,
	// waits for it: the shell would never get the terminal back. The demo
	// does not suspend: it continues its group (the children the terminal
	// stopped with it) and says so.
	f.tstp = make(chan os.Signal, 1)
	f.done = make(chan struct{})
	signal.Notify(f.tstp, syscall.SIGTSTP)
	go func() {
		for {
			select {
			case <-f.tstp:
				_ = unix.Kill(0, unix.SIGCONT)
				// On a line of its own, after the terminal's "^Z".
				fmt.Println()
				step("Ctrl-Z does not suspend the demo; Ctrl-C stops it")
			case <-f.done:
				return
			}
		}
	}()
	return f, nil
}

// setForeground makes pgrp the terminal's foreground group. A process not
// in the foreground group that does so gets SIGTTOU, which stops it: it is
// ignored meanwhile.
func (f *foreground) setForeground(pgrp int) error {
	signal.Ignore(syscall.SIGTTOU)
	// Reset, not left ignored: an ignored signal stays ignored in the
	// processes the demo starts.
	defer signal.Reset(syscall.SIGTTOU)
	return unix.IoctlSetPointerInt(f.fd, unix.TIOCSPGRP, pgrp)
}

// restore gives the terminal back to the group the demo took it from, if
// the demo took it and has it still.
func (f *foreground) restore() error {
	if f.own == 0 {
		return nil
	}
	signal.Stop(f.tstp)
	close(f.done)
	own := f.own
	f.own = 0
	if fg, err := unix.IoctlGetInt(f.fd, unix.TIOCGPGRP); err != nil || fg != own {
		// Someone else has the terminal now (or it is gone): leave it.
		return nil
	}
	if err := f.setForeground(f.previous); err != nil {
		return fmt.Errorf("giving the terminal back to process group %d: %w", f.previous, err)
	}
	return nil
}
