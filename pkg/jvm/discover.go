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

	"golang.org/x/sys/unix"
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
	// StartTime is when the process started: the boot time plus its start time in clock ticks, so the same at
	// every Inspect of one process.
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
	// JavaAgents are the jars of the -javaagent options the JVM was started with (command line, with its
	// @argfiles, and JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS, _JAVA_OPTIONS), as written there.
	JavaAgents []string `json:"javaAgents,omitempty"`
	// StartTicks is the start time in clock ticks after boot; with PID it identifies the process.
	StartTicks uint64 `json:"startTicks"`
}

// Discover lists the JVMs visible in /proc, ordered by pid. A process counts as a JVM only when libjvm.so is
// mapped into it; a name such as "java" is not enough, and /tmp/hsperfdata_* is not used at all because
// -XX:-UsePerfData removes it. Processes that vanish or cannot be read while listing are skipped.
func Discover() ([]JVM, error) {
	return DiscoverIn(nil)
}

// DiscoverIn is Discover limited to the processes of container c (all of /proc when c is nil). Of a process
// outside c only /proc/<pid>/cgroup is read. When not one process of c can be identified it returns an error
// with ReasonContainerNotFound, never the JVMs of the rest of /proc.
func DiscoverIn(c *Container) ([]JVM, error) {
	if c != nil {
		pids, err := ContainerPIDs(c)
		if err != nil {
			return nil, err
		}
		var out []JVM
		for _, pid := range pids {
			if j, err := Inspect(pid); err == nil {
				out = append(out, j)
			}
		}
		return out, nil
	}
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
// JVM, and one wrapping ErrProcessGone when it does not exist. Run as root, it reads the /proc entries of a
// process of another user with that user's filesystem ids (see asProcessFSUser), so it needs no
// CAP_SYS_PTRACE for them.
func Inspect(pid int) (JVM, error) {
	var j JVM
	err := asProcessFSUser(pid, func() error {
		var err error
		j, err = inspect(pid)
		return err
	})
	return j, err
}

// inspect is Inspect on the calling thread's credentials.
func inspect(pid int) (JVM, error) {
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
	j.JavaAgents = javaAgents(opts)
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

// accessDenied explains a refused read of /proc/<pid>: the kernel lets a process without CAP_SYS_PTRACE read
// another's maps, root and environ only when both have the same uids and the reader's permitted capabilities
// include all of the target's (ptrace access mode "read" with the filesystem credentials).
func accessDenied(pid int, err error) error {
	msg := fmt.Sprintf("pid %d: this process may not read its /proc entries", pid)
	target, terr := readStatus(pid)
	self, serr := readStatus(os.Getpid())
	switch {
	case terr != nil || serr != nil:
	case target.UID[3] != self.UID[3] && self.UID[1] == 0 && (!self.HasCapability(unix.CAP_SETUID) || !self.HasCapability(unix.CAP_SETGID)):
		msg += fmt.Sprintf(" (it runs as uid %d; this process runs as root without CAP_SETUID and CAP_SETGID, so it cannot act as the JVM's user, and without CAP_SYS_PTRACE: keep SETUID and SETGID, or run jmx-attach as the JVM's user)", target.UID[1])
	case target.UID[3] != self.UID[3] && self.UID[3] != 0:
		msg += fmt.Sprintf(" (it runs as uid %d, this process as uid %d: run jmx-attach as the JVM's user)", target.UID[1], self.UID[1])
	case target.CapPrm&^self.CapPrm != 0:
		msg += fmt.Sprintf(" (it has capabilities %s that this process lacks: without CAP_SYS_PTRACE the kernel requires them;"+
			" give jmx-attach the JVM's capabilities, or drop them from the JVM)", capNames(target.CapPrm&^self.CapPrm))
	}
	return &AttachError{Reason: ReasonAccessDenied, Msg: msg, Err: err}
}

// capabilityNames are the Linux capabilities by number, as the securityContext of a Kubernetes container
// spells them.
var capabilityNames = []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID",
	"SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK",
	"IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT",
	"SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL",
	"SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
	"CHECKPOINT_RESTORE"}

// capNames names the capabilities in set, comma-separated; unknown ones by number.
func capNames(set uint64) string {
	var names []string
	for c := 0; c < 64; c++ {
		if set&(1<<c) == 0 {
			continue
		}
		if c < len(capabilityNames) {
			names = append(names, capabilityNames[c])
		} else {
			names = append(names, strconv.Itoa(c))
		}
	}
	return strings.Join(names, ",")
}

// mappedJavaHome reads /proc/<pid>/maps and returns the runtime home derived from the mapped libjvm.so, or an
// error wrapping ErrNotJVM when no libjvm.so is mapped. Reading maps needs the same access as attaching, so a
// process that cannot be read is not reported.
func mappedJavaHome(pid int) (string, error) {
	f, err := os.Open(path.Join(procRoot, strconv.Itoa(pid), "maps"))
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return "", accessDenied(pid, err)
		}
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

// processAge returns how long ago a process that started startTicks after boot started, and when: the boot
// time (btime in /proc/stat) plus startTicks, exact to the clock tick and the same at every call, so that it can
// identify the process. The age comes from /proc/uptime.
func processAge(startTicks uint64) (time.Duration, time.Time) {
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
	return age, processStartTime(startTicks)
}

// processStartTime returns when a process that started startTicks after boot started, or the zero time when the
// boot time cannot be read.
func processStartTime(startTicks uint64) time.Time {
	data, err := os.ReadFile(path.Join(procRoot, "stat"))
	if err != nil {
		return time.Time{}
	}
	btime, ok := ParseBootTime(data)
	if !ok {
		return time.Time{}
	}
	return time.Unix(btime, 0).Add(time.Duration(startTicks) * time.Second / clockTicks).UTC()
}

// ParseBootTime returns the boot time, in seconds since the epoch, from the contents of /proc/stat (its btime
// line).
func ParseBootTime(data []byte) (int64, bool) {
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil && n > 0
		}
	}
	return 0, false
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
