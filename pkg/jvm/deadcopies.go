package jvm

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// AgentDirOwnerFile is the file in each copies' directory that names the JVM the copies were made for: its pid
// in its own PID namespace and its start time in clock ticks after boot, which together identify the process
// (the lock file of the JVM is named after the same two numbers).
const AgentDirOwnerFile = ".handlerkit-jvm.json"

// maxOwnerFileSize bounds what is read of an AgentDirOwnerFile.
const maxOwnerFileSize = 4096

// agentDirOwner is the content of AgentDirOwnerFile.
type agentDirOwner struct {
	NSPID      int    `json:"nspid"`
	StartTicks uint64 `json:"startTicks"`
}

// ownerRecord is the AgentDirOwnerFile of the copies made for JVM j.
func ownerRecord(j JVM) namedData {
	data, _ := json.Marshal(agentDirOwner{NSPID: j.NSPID, StartTicks: j.StartTicks})
	return namedData{name: AgentDirOwnerFile, data: data}
}

// RemovedCopies is what removeDeadCopies did: the directories removed, and those it left with the reason.
type RemovedCopies struct {
	Removed []string
	Kept    map[string]string
}

// removeDeadCopies removes, from the directory in JVM j's filesystem in which injections place their copies
// (the Injector's target directory, resolved and checked as for a copy), the copies' directories of JVMs that
// are gone. It runs before j's copies are made, with j's lock held. A directory is removed only when all of
// these hold; otherwise it is left, and nothing in it is touched:
//
//   - its name is AgentDirPrefix and 16 hex digits, it is a real directory (never a link, which is never
//     followed), owned by root, this process's user or the owner jmx-attach gives it, and it holds an
//     AgentDirOwnerFile (a regular file with one link) naming a JVM other than j: only directories jmx-attach
//     created are candidates;
//   - the lock file of that JVM is not held: an injection or reconfiguration that is placing or changing those
//     copies holds it from before the directory exists until the JVM has loaded the jar;
//   - no process on the machine has any of its files open: a write lease (F_SETLEASE), which the kernel grants
//     only when no other open file description of the file exists, is taken on each. A JVM that loaded the jar
//     keeps it open on its class path for its whole life, whatever became of the agent, so a live JVM's copies
//     are never removed, in whatever container or PID namespace it runs;
//   - it holds regular files only, which are unlinked (unlinkat never follows a link) before the directory.
//
// Leases need the file's owner (or CAP_LEASE, which is not asked for): as root, the checks and the removal of a
// directory of another user run on a thread with that user's filesystem ids (asFSUser); a directory neither
// this process's nor one it can act for is left.
func (in *Injector) removeDeadCopies(j JVM) RemovedCopies {
	out := RemovedCopies{Kept: map[string]string{}}
	root, err := openTargetRoot(j.PID)
	if err != nil {
		return out
	}
	defer root.Close()
	trusted, err := trustedOwners(root, j.FSUID)
	if err != nil {
		return out
	}
	pfd, parent, err := openTrustedDir(root, in.targetDir, trusted)
	if err != nil {
		return out
	}
	defer unix.Close(pfd)
	dfd, err := unix.Openat(pfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return out
	}
	dir := os.NewFile(uintptr(dfd), parent)
	names, _ := dir.Readdirnames(-1)
	dir.Close()
	tmp, err := root.open("/tmp", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		tmp = -1
	} else {
		defer unix.Close(tmp)
	}
	self := os.Geteuid()
	for _, name := range names {
		if !isAgentDirName(name) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		owner := int(st.Uid)
		if self != 0 && owner != self {
			out.Kept[name] = fmt.Sprintf("owned by uid %d, not this process's", owner)
			continue
		}
		var why string
		run := func() error {
			why = removeDeadCopy(pfd, tmp, name, j)
			return nil
		}
		if self == 0 && owner != 0 {
			_ = asFSUser(User{UID: owner, GID: int(st.Gid)}, run)
		} else {
			_ = run()
		}
		if why == "" {
			out.Removed = append(out.Removed, parent+"/"+name)
		} else {
			out.Kept[name] = why
		}
	}
	return out
}

// removeDeadCopy removes the copies' directory name under parent when it belongs to a JVM other than j that is
// gone (see removeDeadCopies), and returns "" when it did, or why it did not.
func removeDeadCopy(parent, tmp int, name string, j JVM) string {
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Sprintf("open: %v", err)
	}
	d := os.NewFile(uintptr(fd), name)
	defer d.Close()
	owner, err := readOwnerFile(fd)
	if err != nil {
		return err.Error()
	}
	if owner.NSPID == j.NSPID && owner.StartTicks == j.StartTicks {
		return "the copies of the JVM being injected"
	}
	if tmp >= 0 {
		lockName := markerPrefix + strconv.Itoa(owner.NSPID) + "-" + strconv.FormatUint(owner.StartTicks, 10) + lockSuffix
		lfd, err := unix.Openat(tmp, lockName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		switch {
		case err == nil:
			defer unix.Close(lfd)
			if err := unix.Flock(lfd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
				return "its JVM's lock is held: an injection is at work on it"
			}
		case err != unix.ENOENT:
			return fmt.Sprintf("its JVM's lock cannot be opened: %v", err)
		}
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Sprintf("read: %v", err)
	}
	var leased []int
	defer func() {
		for _, l := range leased {
			_, _ = unix.FcntlInt(uintptr(l), unix.F_SETLEASE, unix.F_UNLCK)
			unix.Close(l)
		}
	}()
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Sprintf("stat %s: %v", n, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Sprintf("%s is not a regular file", n)
		}
		ffd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Sprintf("open %s: %v", n, err)
		}
		leased = append(leased, ffd)
		if _, err := unix.FcntlInt(uintptr(ffd), unix.F_SETLEASE, unix.F_WRLCK); err != nil {
			if err == unix.EAGAIN || err == unix.EBUSY {
				return fmt.Sprintf("%s is open in a process (its JVM runs)", n)
			}
			return fmt.Sprintf("cannot tell whether %s is in use: %v", n, err)
		}
	}
	for _, n := range names {
		if err := unix.Unlinkat(fd, n, 0); err != nil && err != unix.ENOENT {
			return fmt.Sprintf("remove %s: %v", n, err)
		}
	}
	if err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR); err != nil {
		return fmt.Sprintf("remove: %v", err)
	}
	// The JVM's lock file and its marker, if the marker is that very JVM's, go with it: no one injects a JVM that
	// is gone.
	if tmp >= 0 {
		lockName := markerPrefix + strconv.Itoa(owner.NSPID) + "-" + strconv.FormatUint(owner.StartTicks, 10) + lockSuffix
		_ = unix.Unlinkat(tmp, lockName, 0)
		markerName := markerPrefix + strconv.Itoa(owner.NSPID) + ".json"
		if data, err := readAt(tmp, markerName, 64*1024); err == nil {
			var m marker
			if json.Unmarshal(data, &m) == nil && m.StartTicks == owner.StartTicks {
				_ = unix.Unlinkat(tmp, markerName, 0)
			}
		}
	}
	return ""
}

// readOwnerFile reads the AgentDirOwnerFile of the directory dirfd: a regular file with one link, small, that
// names a JVM.
func readOwnerFile(dirfd int) (agentDirOwner, error) {
	fd, err := unix.Openat(dirfd, AgentDirOwnerFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return agentDirOwner{}, fmt.Errorf("no %s: not known whose copies these are", AgentDirOwnerFile)
	}
	f := os.NewFile(uintptr(fd), AgentDirOwnerFile)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || st.Size > maxOwnerFileSize {
		return agentDirOwner{}, fmt.Errorf("%s is not a small regular file with one link", AgentDirOwnerFile)
	}
	buf := make([]byte, maxOwnerFileSize+1)
	n, _ := f.Read(buf)
	var o agentDirOwner
	if err := json.Unmarshal(buf[:n], &o); err != nil || o.NSPID <= 0 || o.StartTicks == 0 {
		return agentDirOwner{}, fmt.Errorf("%s does not name a JVM", AgentDirOwnerFile)
	}
	return o, nil
}
