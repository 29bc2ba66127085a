package jvmtest

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// AttachListenerStarted says whether the process pid (a JVM in the host's
// PID and mount namespaces) has started its attach listener: whether
// /tmp/.java_pid<pid> exists and was created after the process started.
// A socket file of an earlier process with the same pid does not count: a
// JVM killed with SIGKILL leaves its socket in /tmp, and on a busy machine
// pids come round again within hours (pid_max is 32768 here). Tests that
// prove a JVM was never signalled ask this rather than whether the file
// exists.
func AttachListenerStarted(pid int) bool {
	st, err := os.Lstat("/tmp/.java_pid" + strconv.Itoa(pid))
	if err != nil {
		return false
	}
	start, err := processStart(pid)
	if err != nil {
		return true // the process is gone or unreadable: the socket counts
	}
	return !st.ModTime().Before(start)
}

// processStart is when pid started, from /proc/<pid>/stat (clock ticks
// since boot) and /proc/stat's btime; at most a second early, as btime is
// whole seconds.
func processStart(pid int) (time.Time, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return time.Time{}, err
	}
	// The command name (field 2) may hold spaces and parentheses: fields
	// are counted after its closing parenthesis, from field 3.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 20 {
		return time.Time{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	ticks, err := strconv.ParseInt(fields[19], 10, 64) // field 22, starttime
	if err != nil {
		return time.Time{}, err
	}
	boot, err := bootTime()
	if err != nil {
		return time.Time{}, err
	}
	const userHZ = 100 // the unit of /proc's clock ticks on Linux
	return boot.Add(time.Duration(ticks) * time.Second / userHZ), nil
}

func bootTime() (time.Time, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "btime "); ok {
			sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, err
			}
			return time.Unix(sec, 0), nil
		}
	}
	return time.Time{}, fmt.Errorf("/proc/stat: no btime")
}
