package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Without a terminal of its own (see takeForeground), a Ctrl-C sent to the
// whole process group reaches make and the demo at once. GNU make's SIGINT
// handler then waits for its children (waitpid) before it re-raises the
// signal. If the demo has already exited, and make's main loop reaped it in
// the moment before the handler ran, the handler's waitpid finds no child and
// make ends with "make: *** wait: No child processes.  Stop." and status 2:
// a race inside make, met under load when make is not scheduled for the few
// milliseconds the demo needs to stop. So, before exiting on such a Ctrl-C,
// the demo waits until its parent has taken its SIGINT or SIGTERM (the
// signal is no longer pending for it); make is then in its handler, and
// reaps the demo there.

// parentSignalWait bounds that wait: a parent that is stopped, or never
// takes the signal, delays the demo's exit by no more than this.
const parentSignalWait = 5 * time.Second

// awaitParentSignals returns once none of sigs is both caught by the demo's
// parent and pending for it, or after parentSignalWait. It returns at once
// where /proc cannot tell.
func awaitParentSignals(sigs ...unix.Signal) {
	deadline := time.Now().Add(parentSignalWait)
	for time.Now().Before(deadline) {
		st, ok := signalState(unix.Getppid())
		if !ok || !st.waiting(sigs) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// procSignals are a process's signal masks from /proc/<pid>/status.
type procSignals struct {
	pendingMask uint64 // SigPnd | ShdPnd: pending for the thread or the process
	caughtMask  uint64 // SigCgt: signals with a handler
}

func (p procSignals) bit(sig unix.Signal) uint64 { return 1 << (uint(sig) - 1) }

// pending says whether sig waits to be delivered to the process.
func (p procSignals) pending(sig unix.Signal) bool { return p.pendingMask&p.bit(sig) != 0 }

// caught says whether the process has a handler for sig.
func (p procSignals) caught(sig unix.Signal) bool { return p.caughtMask&p.bit(sig) != 0 }

// waiting says whether one of sigs has a handler and is pending: the
// process has yet to run that handler.
func (p procSignals) waiting(sigs []unix.Signal) bool {
	for _, sig := range sigs {
		if p.caught(sig) && p.pending(sig) {
			return true
		}
	}
	return false
}

// signalState reads pid's signal masks; false when they cannot be read.
func signalState(pid int) (procSignals, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return procSignals{}, false
	}
	defer f.Close()
	var st procSignals
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch key {
		case "SigPnd", "ShdPnd":
			dst = &st.pendingMask
		case "SigCgt":
			dst = &st.caughtMask
		default:
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(value), 16, 64)
		if err != nil {
			return procSignals{}, false
		}
		*dst |= mask
		found++
	}
	return st, found == 3
}
