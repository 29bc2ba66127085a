package jvm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// procRoot is where procfs is mounted.
const procRoot = "/proc"

// clockTicks is USER_HZ, the unit of starttime in /proc/<pid>/stat. It is 100 on every Linux architecture Go
// supports; reading it through sysconf would need cgo.
const clockTicks = 100

// ErrNotJVM is returned (wrapped) for a process that is not a HotSpot JVM.
var ErrNotJVM = errors.New("not a JVM")

// ErrProcessGone is returned (wrapped) when the process ended or its pid now names another process.
var ErrProcessGone = errors.New("process is gone")

// JVM describes one running JVM as seen through /proc.
type JVM struct {
	// PID is the process id in the PID namespace of the caller.
	PID int `json:"pid"`
	// NSPID is the process id the JVM sees for itself, in its own PID namespace. It names the attach files.
	NSPID int `json:"nspid"`
	// UID and GID are the effective user and group ids (as the caller's user namespace sees them).
	UID int `json:"uid"`
	GID int `json:"gid"`
	// FSUID and FSGID are the filesystem ids, the owner the JVM's files are created with.
	FSUID int `json:"fsuid"`
	FSGID int `json:"fsgid"`
	// MainClass is the main class, the jar after -jar, or module/class after -m; "" when unknown.
	MainClass string `json:"mainClass,omitempty"`
	// Exe is the executable as the target's mount namespace names it.
	Exe string `json:"exe"`
	// Args is the command line.
	Args []string `json:"args"`
	// StartTime is when the process started.
	StartTime time.Time `json:"startTime"`
	// Age is how long the process has been running when it was inspected.
	Age time.Duration `json:"age"`
	// JavaVersion is JAVA_VERSION from the runtime's release file, "" when there is none.
	JavaVersion string `json:"javaVersion,omitempty"`
	// JavaHome is the runtime's home directory in the target's filesystem, derived from where libjvm.so is.
	JavaHome string `json:"javaHome,omitempty"`
	// AttachDisabled is true when the command line (with its @argfiles) or the JVM option environment variables
	// (JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS, _JAVA_OPTIONS) set -XX:+DisableAttachMechanism.
	AttachDisabled bool `json:"attachDisabled,omitempty"`
	// DynamicAgentLoadingDisabled is true when the same places set -XX:-EnableDynamicAgentLoading, with which the
	// JVM refuses to load an agent over the attach protocol.
	DynamicAgentLoadingDisabled bool `json:"dynamicAgentLoadingDisabled,omitempty"`
	// StartTicks is the start time in clock ticks after boot; with PID it identifies the process.
	StartTicks uint64 `json:"startTicks"`
}

// Discover lists the JVMs visible in /proc, ordered by pid. A process counts as a JVM only when libjvm.so is
// mapped into it; a name such as "java" is not enough, and /tmp/hsperfdata_* is not used at all because
// -XX:-UsePerfData removes it. Processes that vanish or cannot be read while listing are skipped.
func Discover() ([]JVM, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("discover: %w", err)
	}
	self := os.Getpid()
	var out []JVM
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		j, err := Inspect(pid)
		if err != nil {
			continue
		}
		out = append(out, j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].PID < out[b].PID })
	return out, nil
}

// Inspect describes the process pid. It returns an error wrapping ErrNotJVM when the process is not a HotSpot
// JVM, and one wrapping ErrProcessGone when it does not exist.
func Inspect(pid int) (JVM, error) {
	if pid <= 0 {
		return JVM{}, fmt.Errorf("inspect pid %d: invalid pid", pid)
	}
	dir := path.Join(procRoot, strconv.Itoa(pid))
	statData, err := os.ReadFile(path.Join(dir, "stat"))
	if err != nil {
		return JVM{}, procErr(pid, err)
	}
	st, err := ParseStat(statData)
	if err != nil {
		return JVM{}, fmt.Errorf("inspect pid %d: %w", pid, err)
	}
	if st.State == 'Z' || st.State == 'X' {
		return JVM{}, fmt.Errorf("inspect pid %d: zombie: %w", pid, ErrProcessGone)
	}
	javaHome, err := mappedJavaHome(pid)
	if err != nil {
		return JVM{}, err
	}
	statusData, err := os.ReadFile(path.Join(dir, "status"))
	if err != nil {
		return JVM{}, procErr(pid, err)
	}
	status, err := ParseStatus(statusData)
	if err != nil {
		return JVM{}, fmt.Errorf("inspect pid %d: %w", pid, err)
	}
	cmdline, err := os.ReadFile(path.Join(dir, "cmdline"))
	if err != nil {
		return JVM{}, procErr(pid, err)
	}
	exe, _ := os.Readlink(path.Join(dir, "exe"))
	args := ParseCmdline(cmdline)
	age, start := processAge(st.StartTicks)
	j := JVM{
		PID:        pid,
		NSPID:      status.NSPID(),
		UID:        status.UID[1],
		GID:        status.GID[1],
		FSUID:      status.UID[3],
		FSGID:      status.GID[3],
		MainClass:  MainClass(args),
		Exe:        strings.TrimSuffix(exe, " (deleted)"),
		Args:       args,
		StartTime:  start,
		Age:        age,
		JavaHome:   javaHome,
		StartTicks: st.StartTicks,
	}
	opts := vmOptions(pid, args)
	j.AttachDisabled, _ = vmFlag(opts, "DisableAttachMechanism")
	if enabled, set := vmFlag(opts, "EnableDynamicAgentLoading"); set && !enabled {
		j.DynamicAgentLoadingDisabled = true
	}
	if javaHome != "" {
		j.JavaVersion = readJavaVersion(pid, javaHome)
	}
	return j, nil
}

func procErr(pid int, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errESRCH) {
		return fmt.Errorf("inspect pid %d: %w", pid, ErrProcessGone)
	}
	return fmt.Errorf("inspect pid %d: %w", pid, err)
}

// mappedJavaHome reads /proc/<pid>/maps and returns the runtime home derived from the mapped libjvm.so, or an
// error wrapping ErrNotJVM when no libjvm.so is mapped. Reading maps needs the same access as attaching, so a
// process that cannot be read is not reported.
func mappedJavaHome(pid int) (string, error) {
	f, err := os.Open(path.Join(procRoot, strconv.Itoa(pid), "maps"))
	if err != nil {
		return "", procErr(pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		i := bytes.IndexByte(line, '/')
		if i < 0 {
			continue
		}
		file := string(bytes.TrimSuffix(line[i:], []byte(" (deleted)")))
		if path.Base(file) != "libjvm.so" {
			continue
		}
		// <home>/lib/server/libjvm.so (9+), <home>/jre/lib/<arch>/server/libjvm.so (8).
		home := path.Dir(path.Dir(path.Dir(file)))
		if path.Base(home) == "lib" {
			home = path.Dir(home)
		}
		return home, nil
	}
	if err := sc.Err(); err != nil {
		return "", procErr(pid, err)
	}
	return "", fmt.Errorf("inspect pid %d: %w: libjvm.so is not mapped", pid, ErrNotJVM)
}

// processAge returns how long ago a process that started startTicks after boot started, and when.
func processAge(startTicks uint64) (time.Duration, time.Time) {
	now := time.Now()
	data, err := os.ReadFile(path.Join(procRoot, "uptime"))
	if err != nil {
		return 0, time.Time{}
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0, time.Time{}
	}
	up, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, time.Time{}
	}
	age := time.Duration(up*float64(time.Second)) - time.Duration(startTicks)*time.Second/clockTicks
	if age < 0 {
		age = 0
	}
	return age, now.Add(-age).Truncate(10 * time.Millisecond)
}

// readJavaVersion reads <home>/release inside the target's filesystem.
func readJavaVersion(pid int, home string) string {
	root, err := openTargetRoot(pid)
	if err != nil {
		return ""
	}
	defer root.Close()
	for dir := home; dir != "/" && dir != "."; dir = path.Dir(dir) {
		data, err := root.readFile(path.Join(dir, "release"), 64*1024)
		if err == nil {
			if v := parseReleaseVersion(data); v != "" {
				return v
			}
		}
		if path.Base(dir) != "jre" {
			break
		}
	}
	return ""
}
