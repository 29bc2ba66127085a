package jvm

import (
	"fmt"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
)

// containerIDLen is the length of a container id as CRI runtimes (containerd, CRI-O, Docker) write it: 64 hex
// digits.
const containerIDLen = 64

// runtimeScopePrefixes are the prefixes with which container runtimes name a container's cgroup around its id:
// the systemd cgroup driver's "<prefix>-<id>.scope", and CRI-O's cgroupfs "crio-<id>". A prefix ending in
// "conmon" (CRI-O's monitor process, which is outside the container) is not one of them.
var runtimeScopePrefixes = []string{"cri-containerd", "crio", "docker", "libpod", "cri-o"}

// Container identifies the processes of one container by their cgroups, the only thing the kernel records about
// a process that the process cannot change from inside (it cannot move itself out of its container's cgroup
// subtree). A process belongs to the container when its /proc/<pid>/cgroup names the container's id as a
// component of a cgroup path (cgroupfs "/kubepods/.../<id>", systemd "cri-containerd-<id>.scope",
// "crio-<id>.scope", "docker-<id>.scope", and the same seen from a private cgroup namespace, "/../...<id>..."),
// or, when this process runs inside the container itself (its own cgroup names the id, or is the root "/" of a
// private cgroup namespace), when its cgroup is this process's own.
//
// Nothing but /proc/<pid>/cgroup is read of a process that does not belong; a process whose cgroup cannot be
// read does not belong.
type Container struct {
	// ID is the container id, 64 hex digits; Runtime the part before "://" ("" when none was given).
	ID, Runtime string
	// self is this process's cgroup file when it runs inside the container (see above), nil otherwise.
	self []cgroupLine
}

// cgroupLine is one line of /proc/<pid>/cgroup: "hierarchy-id:controllers:path".
type cgroupLine struct {
	hierarchy, controllers, path string
}

// ParseContainerID checks a container id as status.containerStatuses[].containerID spells it,
// "<runtime>://<64 hex digits>" (a bare id is accepted too), and returns the runtime and the id in lower case.
func ParseContainerID(s string) (runtime, id string, err error) {
	id = s
	if r, rest, ok := strings.Cut(s, "://"); ok {
		runtime, id = r, rest
	}
	id = strings.ToLower(id)
	if len(id) != containerIDLen || strings.Trim(id, "0123456789abcdef") != "" {
		return "", "", fmt.Errorf("container id %q is not <runtime>://<64 hex digits>", s)
	}
	return runtime, id, nil
}

// NewContainer returns the Container with the given id ("<runtime>://<64 hex digits>"), judged from this
// process's own cgroup.
func NewContainer(containerID string) (*Container, error) {
	self, err := os.ReadFile(path.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return nil, fmt.Errorf("read this process's cgroup: %w", err)
	}
	return newContainer(containerID, self)
}

// newContainer is NewContainer with this process's cgroup file given.
func newContainer(containerID string, selfCgroup []byte) (*Container, error) {
	runtime, id, err := ParseContainerID(containerID)
	if err != nil {
		return nil, err
	}
	c := &Container{ID: id, Runtime: runtime}
	self := parseCgroupFile(selfCgroup)
	if len(self) > 0 && (c.namesID(self) || atNamespaceRoot(self)) {
		c.self = self
	}
	return c, nil
}

// String is the container's id as given, for messages.
func (c *Container) String() string {
	if c.Runtime == "" {
		return c.ID
	}
	return c.Runtime + "://" + c.ID
}

// Contains reports whether process pid belongs to the container. It reads /proc/<pid>/cgroup and nothing else;
// a process whose cgroup cannot be read (it ended, or it is hidden) does not belong.
func (c *Container) Contains(pid int) bool {
	data, err := os.ReadFile(path.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return false
	}
	return c.matchCgroup(data)
}

// matchCgroup reports whether a process whose /proc/<pid>/cgroup holds data belongs to the container.
func (c *Container) matchCgroup(data []byte) bool {
	lines := parseCgroupFile(data)
	if len(lines) == 0 {
		return false
	}
	if c.namesID(lines) {
		return true
	}
	return c.self != nil && sameCgroups(c.self, lines)
}

// namesID reports whether a component of one of the cgroup paths is the container's cgroup.
func (c *Container) namesID(lines []cgroupLine) bool {
	for _, l := range lines {
		for _, comp := range strings.Split(l.path, "/") {
			if c.isContainerComponent(comp) {
				return true
			}
		}
	}
	return false
}

// isContainerComponent reports whether one cgroup path component is the container's own cgroup: the id itself
// (cgroupfs), or a runtime's prefix, "-", the id and, for the systemd driver, ".scope".
func (c *Container) isContainerComponent(comp string) bool {
	if comp == c.ID {
		return true
	}
	name := strings.TrimSuffix(comp, ".scope")
	prefix, ok := strings.CutSuffix(name, "-"+c.ID)
	if !ok {
		return false
	}
	for _, p := range runtimeScopePrefixes {
		if prefix == p {
			return true
		}
	}
	return false
}

// parseCgroupFile parses /proc/<pid>/cgroup, skipping malformed lines.
func parseCgroupFile(data []byte) []cgroupLine {
	var out []cgroupLine
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || f[2] == "" {
			continue
		}
		out = append(out, cgroupLine{hierarchy: f[0], controllers: f[1], path: strings.TrimSuffix(f[2], " (deleted)")})
	}
	return out
}

// atNamespaceRoot reports whether every cgroup path is "/": this process is at the root of its cgroup
// namespace, as a container's processes are under a private cgroup namespace.
func atNamespaceRoot(lines []cgroupLine) bool {
	for _, l := range lines {
		if l.path != "/" {
			return false
		}
	}
	return true
}

// sameCgroups reports whether two processes are in the same cgroup of every hierarchy.
func sameCgroups(a, b []cgroupLine) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// containerNotFound is the error for a container none of whose processes can be identified.
func containerNotFound(c *Container) error {
	return &AttachError{Reason: ReasonContainerNotFound, Msg: fmt.Sprintf(
		"no process of container %s can be identified from here (no /proc/<pid>/cgroup names it); nothing was touched, and no process outside it is considered", c)}
}

// notInContainer is the error for a pid that is not a process of the container.
func notInContainer(c *Container, pid int) error {
	return &AttachError{Reason: ReasonContainerNotFound, Msg: fmt.Sprintf(
		"pid %d is not a process of container %s; it was not touched", pid, c)}
}

// ContainerPIDs returns the pids of the processes of container c visible in /proc, except this process, in
// ascending order. None is an error with ReasonContainerNotFound.
func ContainerPIDs(c *Container) ([]int, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", procRoot, err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || !c.Contains(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	if len(pids) == 0 {
		return nil, containerNotFound(c)
	}
	return pids, nil
}
