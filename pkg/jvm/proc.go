package jvm

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Status is the part of /proc/<pid>/status that finding and attaching to a JVM needs.
type Status struct {
	// Name is the command name (comm), at most 15 bytes.
	Name string
	// PID is the process id as seen from the reader's PID namespace.
	PID int
	// NSPIDs lists the thread-group id in each nested PID namespace, outermost first (the NStgid line). It is
	// empty on kernels older than 4.1.
	NSPIDs []int
	// UID holds the real, effective, saved and filesystem user ids.
	UID [4]int
	// GID holds the real, effective, saved and filesystem group ids.
	GID [4]int
	// SigBlk, SigIgn and SigCgt are the blocked, ignored and caught signal masks (bit n-1 is signal n).
	SigBlk, SigIgn, SigCgt uint64
	// CapEff is the effective capability set (bit n is capability n), relative to the process's user namespace.
	CapEff uint64
	// CapPrm is the permitted capability set.
	CapPrm uint64
}

// NSPID returns the pid the process sees for itself: the innermost NStgid, or PID when the kernel does not
// report namespaced ids.
func (s Status) NSPID() int {
	if len(s.NSPIDs) == 0 {
		return s.PID
	}
	return s.NSPIDs[len(s.NSPIDs)-1]
}

// CatchesSignal reports whether the process has a handler installed for signal sig.
func (s Status) CatchesSignal(sig int) bool {
	if sig < 1 || sig > 64 {
		return false
	}
	bit := uint64(1) << (sig - 1)
	return s.SigCgt&bit != 0 && s.SigIgn&bit == 0
}

// capNetBindService is CAP_NET_BIND_SERVICE, the capability to bind a port below
// net.ipv4.ip_unprivileged_port_start.
const capNetBindService = 10

// HasCapability reports whether capability c is in the effective set.
func (s Status) HasCapability(c int) bool {
	return c >= 0 && c < 64 && s.CapEff&(uint64(1)<<c) != 0
}

// ParseStatus parses the contents of /proc/<pid>/status.
func ParseStatus(data []byte) (Status, error) {
	var s Status
	var havePID, haveUID, haveGID, haveNStgid bool
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte("\n"))
		key, val, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v := strings.TrimSpace(string(val))
		var err error
		switch string(key) {
		case "Name":
			s.Name = v
		case "Pid":
			s.PID, err = strconv.Atoi(v)
			havePID = err == nil
		case "NStgid":
			s.NSPIDs, err = parseInts(v)
			haveNStgid = err == nil
		case "NSpid":
			// NSpid equals NStgid for a thread-group leader; it is only a fallback.
			if !haveNStgid {
				s.NSPIDs, err = parseInts(v)
			}
		case "Uid":
			err = parseIDs(v, &s.UID)
			haveUID = err == nil
		case "Gid":
			err = parseIDs(v, &s.GID)
			haveGID = err == nil
		case "SigBlk":
			s.SigBlk, err = strconv.ParseUint(v, 16, 64)
		case "SigIgn":
			s.SigIgn, err = strconv.ParseUint(v, 16, 64)
		case "SigCgt":
			s.SigCgt, err = strconv.ParseUint(v, 16, 64)
		case "CapEff":
			s.CapEff, err = strconv.ParseUint(v, 16, 64)
		case "CapPrm":
			s.CapPrm, err = strconv.ParseUint(v, 16, 64)
		}
		if err != nil {
			return Status{}, fmt.Errorf("parse status: field %s: %w", key, err)
		}
	}
	if !havePID || !haveUID || !haveGID {
		return Status{}, errors.New("parse status: missing Pid, Uid or Gid")
	}
	if s.PID <= 0 {
		return Status{}, fmt.Errorf("parse status: invalid pid %d", s.PID)
	}
	for _, p := range s.NSPIDs {
		if p <= 0 {
			return Status{}, fmt.Errorf("parse status: invalid namespaced pid %d", p)
		}
	}
	return s, nil
}

func parseInts(v string) ([]int, error) {
	fields := strings.Fields(v)
	out := make([]int, 0, len(fields))
	for _, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func parseIDs(v string, dst *[4]int) error {
	ids, err := parseInts(v)
	if err != nil {
		return err
	}
	if len(ids) != 4 {
		return fmt.Errorf("want 4 ids, got %d", len(ids))
	}
	for i, id := range ids {
		if id < 0 {
			return fmt.Errorf("negative id %d", id)
		}
		dst[i] = id
	}
	return nil
}

// Stat is the part of /proc/<pid>/stat that this package needs.
type Stat struct {
	// PID is the process id.
	PID int
	// Comm is the command name.
	Comm string
	// State is the one-letter process state (R, S, D, Z, ...).
	State byte
	// PPID is the parent's process id.
	PPID int
	// StartTicks is the process start time in clock ticks after boot. Together with PID it identifies a process
	// even when pids are reused.
	StartTicks uint64
	// ExitCode is the exit status in the form wait(2) reports it (field 52, Linux 3.5 and later). It means
	// something only once the process has ended, in state Z; 0 when the field is missing.
	ExitCode int
}

// ExitHint describes how an ended process (State 'Z') ended, from ExitCode: "exit status 1" or "killed by
// signal 9 (killed)". It returns "" for a process that has not ended.
func (s Stat) ExitHint() string {
	if s.State != 'Z' && s.State != 'X' {
		return ""
	}
	ws := unix.WaitStatus(s.ExitCode)
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return fmt.Sprintf("killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
	}
	return ""
}

// ParseStat parses the contents of /proc/<pid>/stat.
func ParseStat(data []byte) (Stat, error) {
	// comm may hold spaces and parentheses, so it is everything between the first '(' and the last ')'.
	open := bytes.IndexByte(data, '(')
	end := bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return Stat{}, errors.New("parse stat: no (comm)")
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data[:open])))
	if err != nil || pid <= 0 {
		return Stat{}, fmt.Errorf("parse stat: invalid pid %q", data[:open])
	}
	rest := strings.Fields(string(data[end+1:]))
	// rest[0] is field 3 (state); starttime is field 22.
	if len(rest) < 20 {
		return Stat{}, fmt.Errorf("parse stat: %d fields after comm, want at least 20", len(rest))
	}
	if len(rest[0]) != 1 {
		return Stat{}, fmt.Errorf("parse stat: invalid state %q", rest[0])
	}
	ppid, err := strconv.Atoi(rest[1])
	if err != nil {
		return Stat{}, fmt.Errorf("parse stat: ppid: %w", err)
	}
	start, err := strconv.ParseUint(rest[19], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("parse stat: starttime: %w", err)
	}
	st := Stat{PID: pid, Comm: string(data[open+1 : end]), State: rest[0][0], PPID: ppid, StartTicks: start}
	// rest[49] is field 52, exit_code; older kernels do not have it.
	if len(rest) >= 50 {
		if code, err := strconv.Atoi(rest[49]); err == nil {
			st.ExitCode = code
		}
	}
	return st, nil
}

// TCPListen is the socket state "LISTEN" in /proc/net/tcp.
const TCPListen = 0x0A

// tcpStates names the kernel's TCP states as /proc/net/tcp numbers them.
var tcpStates = map[int]string{1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
	6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", TCPListen: "LISTEN", 11: "CLOSING"}

// StateName returns the socket's TCP state as the kernel names it, such as "LISTEN" or "ESTABLISHED".
func (s Socket) StateName() string {
	if n, ok := tcpStates[s.State]; ok {
		return n
	}
	return fmt.Sprintf("state-%d", s.State)
}

// Socket is one line of /proc/<pid>/net/tcp or tcp6.
type Socket struct {
	LocalIP    net.IP
	LocalPort  int
	RemoteIP   net.IP
	RemotePort int
	// State is the kernel's TCP state number; TCPListen for a listening socket.
	State int
	// UID is the socket owner's uid.
	UID int
	// Inode is the socket's inode number.
	Inode uint64
}

// ParseNetTCP parses the contents of /proc/<pid>/net/tcp or /proc/<pid>/net/tcp6. Both list the sockets of the
// network namespace the process is in.
func ParseNetTCP(data []byte) ([]Socket, error) {
	var out []Socket
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	first := true
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if first {
			first = false
			if strings.HasPrefix(line, "sl") {
				continue
			}
		}
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 10 {
			return nil, fmt.Errorf("parse net/tcp: short line %q", line)
		}
		lip, lport, err := parseHexAddr(f[1])
		if err != nil {
			return nil, fmt.Errorf("parse net/tcp: local address: %w", err)
		}
		rip, rport, err := parseHexAddr(f[2])
		if err != nil {
			return nil, fmt.Errorf("parse net/tcp: remote address: %w", err)
		}
		st, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("parse net/tcp: state %q: %w", f[3], err)
		}
		uid, err := strconv.Atoi(f[7])
		if err != nil || uid < 0 {
			return nil, fmt.Errorf("parse net/tcp: uid %q", f[7])
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse net/tcp: inode %q: %w", f[9], err)
		}
		out = append(out, Socket{LocalIP: lip, LocalPort: lport, RemoteIP: rip, RemotePort: rport, State: int(st),
			UID: uid, Inode: inode})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse net/tcp: %w", err)
	}
	return out, nil
}

// parseHexAddr parses "0100007F:1F90": an address as 32-bit words in host (little-endian) byte order, then the
// port in hex.
func parseHexAddr(s string) (net.IP, int, error) {
	addr, port, ok := strings.Cut(s, ":")
	if !ok {
		return nil, 0, fmt.Errorf("no port in %q", s)
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil {
		return nil, 0, fmt.Errorf("port %q: %w", port, err)
	}
	if len(addr) != 8 && len(addr) != 32 {
		return nil, 0, fmt.Errorf("address %q has %d hex digits, want 8 or 32", addr, len(addr))
	}
	raw, err := hex.DecodeString(addr)
	if err != nil {
		return nil, 0, fmt.Errorf("address %q: %w", addr, err)
	}
	ip := make(net.IP, len(raw))
	for w := 0; w < len(raw); w += 4 {
		ip[w], ip[w+1], ip[w+2], ip[w+3] = raw[w+3], raw[w+2], raw[w+1], raw[w]
	}
	return ip, int(p), nil
}

// ParseCmdline splits the contents of /proc/<pid>/cmdline into arguments.
func ParseCmdline(data []byte) []string {
	data = bytes.TrimRight(data, "\x00")
	if len(data) == 0 {
		return nil
	}
	parts := bytes.Split(data, []byte{0})
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = string(p)
	}
	return out
}

// launcherOptionsWithValue are java launcher options whose value is the next argument.
var launcherOptionsWithValue = map[string]bool{
	"-cp": true, "-classpath": true, "--class-path": true, "-p": true, "--module-path": true,
	"--upgrade-module-path": true, "--add-modules": true, "--add-reads": true, "--add-exports": true,
	"--add-opens": true, "--limit-modules": true, "--patch-module": true, "--enable-native-access": true,
	"--source": true,
}

// MainClass returns what a java command line runs: the main class, "-jar <file>" as the jar file, or
// "<module>/<class>" for -m. It returns "" when args hold none of these (for example a JVM embedded through
// JNI, or one started from an @argfile).
func MainClass(args []string) string {
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-jar":
			if i+1 < len(args) {
				return args[i+1]
			}
			return ""
		case a == "-m" || a == "--module":
			if i+1 < len(args) {
				return args[i+1]
			}
			return ""
		case strings.HasPrefix(a, "--module="):
			return strings.TrimPrefix(a, "--module=")
		case launcherOptionsWithValue[a]:
			i++
		case strings.HasPrefix(a, "-"), strings.HasPrefix(a, "@"):
		default:
			return a
		}
	}
	return ""
}

// vmFlag returns the last setting of the boolean -XX:[+-]name option in args, and whether there was one.
func vmFlag(args []string, name string) (value, set bool) {
	for _, a := range args {
		switch a {
		case "-XX:+" + name:
			value, set = true, true
		case "-XX:-" + name:
			value, set = false, true
		}
	}
	return value, set
}

// parseReleaseVersion returns JAVA_VERSION from the contents of a JDK's "release" file.
func parseReleaseVersion(data []byte) string {
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "JAVA_VERSION="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}
