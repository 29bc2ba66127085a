package jvm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultMinMemoryHeadroom is the room an Injector requires under the memory limit of the JVM's container
// before it loads the agent: 40 MiB. The agent costs 28 to 39 MB of memory outside the heap once it serves
// (measured on JDK 17, see docs/agent.md): classes, threads, buffers.
const DefaultMinMemoryHeadroom = 40 << 20

// WithMinMemoryHeadroom sets the room, in bytes, the JVM's container must have under its memory limit (limit
// minus usage, reclaimable file cache not counted) for the agent to be loaded; less is refused with
// ReasonInsufficientMemory before any signal, rather than risk the container's OOM kill. Zero disables the
// check. Default: DefaultMinMemoryHeadroom.
func WithMinMemoryHeadroom(bytes int64) Option {
	return func(in *Injector) error {
		if bytes < 0 {
			return fmt.Errorf("min memory headroom %d is negative", bytes)
		}
		in.minHeadroom = bytes
		return nil
	}
}

// noLimit is a cgroup v1 memory.limit_in_bytes at or above which there is no limit (the kernel reports its
// page counter's maximum, rounded to pages, for "unlimited").
const noLimit = int64(1) << 62

// MemoryLevel is the memory accounting of one cgroup on the way from the JVM's cgroup up to the root of the
// cgroup hierarchy that can be seen.
type MemoryLevel struct {
	// Path names the cgroup: the directory read, as this process or the JVM sees it.
	Path string
	// Limit is the memory limit in bytes; 0 when there is none.
	Limit int64
	// Usage is the memory charged to the cgroup, page cache included.
	Usage int64
	// InactiveFile is the part of Usage that is inactive file cache, which the kernel reclaims before it
	// kills anything.
	InactiveFile int64
}

// Room returns the bytes left under the limit when the inactive file cache is reclaimed, and whether there is
// a limit.
func (l MemoryLevel) Room() (int64, bool) {
	if l.Limit == 0 {
		return 0, false
	}
	return l.Limit - max(l.Usage-l.InactiveFile, 0), true
}

// checkMemoryHeadroom refuses, with ReasonInsufficientMemory, a JVM whose cgroup, or a cgroup above it, has a
// memory limit with less than need bytes of room. A JVM whose cgroup cannot be found or read is not refused:
// there is nothing to judge by.
func checkMemoryHeadroom(j JVM, need int64) error {
	if need <= 0 {
		return nil
	}
	levels, err := MemoryLevels(j.PID)
	if err != nil {
		return nil
	}
	for _, l := range levels {
		room, limited := l.Room()
		if !limited || room >= need {
			continue
		}
		return &AttachError{Reason: ReasonInsufficientMemory, Msg: fmt.Sprintf(
			"the memory limit of pid %d's cgroup %s is %s, of which %s are in use (besides %s of reclaimable file cache): "+
				"%s of room, less than the %s the agent needs; nothing was loaded, rather than risk the container's OOM kill",
			j.PID, l.Path, mib(l.Limit), mib(max(l.Usage-l.InactiveFile, 0)), mib(l.InactiveFile), mib(max(room, 0)), mib(need))}
	}
	return nil
}

// mib formats n bytes in MiB.
func mib(n int64) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB" }

// MemoryLevels returns the memory accounting of the cgroup of process pid and of every cgroup above it that can
// be seen, innermost first. It finds the cgroup as the node sees it (this process's cgroup mounts and the path
// in /proc/<pid>/cgroup, for jmx-attach on the node) or as the JVM sees it (the cgroup mount in the JVM's own
// mount table, reached through /proc/<pid>/root, for jmx-attach in an ephemeral container whose cgroup
// namespace is not the JVM's), and believes a directory only when its cgroup.procs lists pid. cgroup v2
// (memory.max, memory.current, memory.stat inactive_file) and v1 (the memory controller's
// memory.limit_in_bytes, memory.usage_in_bytes, memory.stat total_inactive_file) are read.
func MemoryLevels(pid int) ([]MemoryLevel, error) {
	data, err := os.ReadFile(path.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return nil, procErr(pid, err)
	}
	v2, v1 := parseProcCgroup(data)
	self, _ := os.ReadFile(path.Join(procRoot, "self", "mountinfo"))
	theirs, _ := os.ReadFile(path.Join(procRoot, strconv.Itoa(pid), "mountinfo"))
	var errs []error
	for _, view := range []struct {
		mounts []byte
		inRoot bool
	}{{self, false}, {theirs, true}} {
		for _, m := range ParseMountInfo(view.mounts) {
			var cg string
			switch {
			case m.FSType == "cgroup2" && v2 != "":
				cg = v2
			case m.FSType == "cgroup" && v1 != "" && hasOption(m.SuperOptions, "memory"):
				cg = v1
			default:
				continue
			}
			rel, ok := cgroupRel(cg, m.Root)
			if !ok {
				continue
			}
			levels, err := readLevels(pid, m.MountPoint, rel, view.inRoot)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if len(levels) > 0 {
				return levels, nil
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return nil, fmt.Errorf("no memory cgroup of pid %d can be seen", pid)
}

// parseProcCgroup returns the cgroup v2 path and the v1 memory controller's path of /proc/<pid>/cgroup.
func parseProcCgroup(data []byte) (v2, v1 string) {
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			v2 = f[2]
		case hasOption(f[1], "memory"):
			v1 = f[2]
		}
	}
	return v2, v1
}

// hasOption reports whether the comma-separated list has opt.
func hasOption(list, opt string) bool {
	for _, o := range strings.Split(list, ",") {
		if o == opt {
			return true
		}
	}
	return false
}

// cgroupRel returns the path of cgroup cg below the root of a cgroup mount whose root is root (both as
// /proc shows them to this process), or false when cg is not below it. A path with ".." (a cgroup outside this
// process's cgroup namespace) matches only a mount of that very cgroup.
func cgroupRel(cg, root string) (string, bool) {
	switch {
	case cg == root:
		return "", true
	case strings.Contains(cg, "/..") || strings.Contains(root, "/.."):
		return "", false
	case root == "/":
		return strings.TrimPrefix(cg, "/"), true
	case strings.HasPrefix(cg, root+"/"):
		return cg[len(root)+1:], true
	}
	return "", false
}

// readLevels opens the cgroup directory rel below the mount point mountPoint (in the JVM's filesystem when
// inRoot, otherwise in this process's), checks that its cgroup.procs lists pid, and reads it and every
// directory above it up to the mount point.
func readLevels(pid int, mountPoint, rel string, inRoot bool) ([]MemoryLevel, error) {
	var fd int
	var err error
	name := mountPoint
	if inRoot {
		root, rerr := openTargetRoot(pid)
		if rerr != nil {
			return nil, rerr
		}
		fd, err = root.open(mountPoint, unix.O_PATH|unix.O_DIRECTORY, 0)
		root.Close()
		name = "/proc/" + strconv.Itoa(pid) + "/root" + mountPoint
	} else {
		fd, err = unix.Open(mountPoint, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	fds := []int{fd}
	names := []string{name}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, part := range strings.Split(rel, "/") {
		if part == "" {
			continue
		}
		if part == "." || part == ".." {
			return nil, fmt.Errorf("cgroup path %q is not plain", rel)
		}
		next, err := unix.Openat(fds[len(fds)-1], part, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", path.Join(names[len(names)-1], part), err)
		}
		fds = append(fds, next)
		names = append(names, path.Join(names[len(names)-1], part))
	}
	leaf := fds[len(fds)-1]
	procs, err := readAt(leaf, "cgroup.procs", 4<<20)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", names[len(names)-1], err)
	}
	if !listsPID(procs, pid) {
		return nil, fmt.Errorf("%s does not list pid %d", names[len(names)-1], pid)
	}
	var levels []MemoryLevel
	for i := len(fds) - 1; i >= 0; i-- {
		l, ok, err := readMemoryLevel(fds[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", names[i], err)
		}
		if ok {
			l.Path = names[i]
			levels = append(levels, l)
		}
	}
	return levels, nil
}

// listsPID reports whether a cgroup.procs file lists pid.
func listsPID(procs []byte, pid int) bool {
	want := strconv.Itoa(pid)
	sc := bufio.NewScanner(bytes.NewReader(procs))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == want {
			return true
		}
	}
	return false
}

// readMemoryLevel reads the memory accounting of the cgroup directory dirfd, cgroup v2 or v1; ok is false for
// a cgroup without memory accounting (the root of a v2 hierarchy, or one without the memory controller).
func readMemoryLevel(dirfd int) (l MemoryLevel, ok bool, err error) {
	if data, err := readAt(dirfd, "memory.max", 64); err == nil {
		if v := strings.TrimSpace(string(data)); v != "max" {
			if l.Limit, err = strconv.ParseInt(v, 10, 64); err != nil {
				return l, false, fmt.Errorf("memory.max: %w", err)
			}
		}
		if l.Usage, err = readInt(dirfd, "memory.current"); err != nil {
			return l, false, err
		}
		l.InactiveFile, err = readMemoryStat(dirfd, "inactive_file")
		return l, err == nil, err
	}
	limit, err := readInt(dirfd, "memory.limit_in_bytes")
	if err != nil {
		return l, false, nil
	}
	if limit < noLimit {
		l.Limit = limit
	}
	if l.Usage, err = readInt(dirfd, "memory.usage_in_bytes"); err != nil {
		return l, false, err
	}
	l.InactiveFile, err = readMemoryStat(dirfd, "total_inactive_file")
	return l, err == nil, err
}

// readAt reads at most limit bytes of the file name in dirfd.
func readAt(dirfd int, name string, limit int64) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// readInt reads a file holding one decimal number.
func readInt(dirfd int, name string) (int64, error) {
	data, err := readAt(dirfd, name, 64)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}

// readMemoryStat returns the value of key in the memory.stat file of dirfd; a key that is missing counts as 0.
func readMemoryStat(dirfd int, key string) (int64, error) {
	data, err := readAt(dirfd, "memory.stat", 1<<20)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("memory.stat %s: %w", key, err)
			}
			return n, nil
		}
	}
	return 0, nil
}
