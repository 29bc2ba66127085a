package jvm

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxSymlinks bounds the symbolic links followed while walking to a directory, as the kernel's 40.
const maxSymlinks = 40

// openTrustedDir opens dir in the target's filesystem one component at a time, from the target's root, and
// checks each directory on the way: owned by a trusted uid, and writable by group or others only when sticky or
// when it is the root of a pod's own volume (see podVolumeDir). A symbolic link on the way (a /tmp that links to
// /var/tmp) is resolved inside the target's root, as the kernel resolves it for the JVM, when a trusted uid owns
// it: an absolute target from the target's root, a relative one from the link's directory, ".." never above
// the root; every directory of the resolved path is checked the same way. It returns an O_PATH descriptor of
// dir and dir's real path, without symbolic links, in the target's filesystem: the path to give the JVM.
func openTrustedDir(root *targetRoot, dir string, trusted map[int]bool) (int, string, error) {
	openRoot := func() (int, error) {
		fd, err := unix.Openat(root.fd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("open the root of pid %d: %w", root.pid, err)
		}
		if err := checkTrustedDir(root.pid, fd, "/", trusted); err != nil {
			unix.Close(fd)
			return -1, err
		}
		return fd, nil
	}
	cur, err := openRoot()
	if err != nil {
		return -1, "", err
	}
	walked := "/"
	queue := splitPath(dir)
	links := 0
	for len(queue) > 0 {
		part := queue[0]
		queue = queue[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			// Walk again from the root to the parent of the real path walked so far: the root has no parent.
			unix.Close(cur)
			if cur, err = openRoot(); err != nil {
				return -1, "", err
			}
			queue = append(splitPath(path.Dir(walked)), queue...)
			walked = "/"
			continue
		}
		p := path.Join(walked, part)
		next, err := unix.Openat(cur, part, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOTDIR || err == unix.ELOOP {
			target, lerr := trustedLink(cur, part, p, trusted)
			if lerr != nil {
				unix.Close(cur)
				return -1, "", lerr
			}
			if links++; links > maxSymlinks {
				unix.Close(cur)
				return -1, "", fmt.Errorf("%s: more than %d symbolic links", dir, maxSymlinks)
			}
			if path.IsAbs(target) {
				unix.Close(cur)
				if cur, err = openRoot(); err != nil {
					return -1, "", err
				}
				walked = "/"
			}
			queue = append(splitPath(target), queue...)
			continue
		}
		unix.Close(cur)
		if err != nil {
			return -1, "", &os.PathError{Op: "open", Path: p, Err: err}
		}
		if err := checkTrustedDir(root.pid, next, p, trusted); err != nil {
			unix.Close(next)
			return -1, "", err
		}
		cur, walked = next, p
	}
	return cur, walked, nil
}

// splitPath splits p at slashes.
func splitPath(p string) []string { return strings.Split(p, "/") }

// trustedLink returns the target of the symbolic link name in dirfd (p names it in errors), when a trusted uid
// owns the link; anything else that is not a directory is an error.
func trustedLink(dirfd int, name, p string, trusted map[int]bool) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "", &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return "", fmt.Errorf("%s is not a directory; the copies are only placed under directories", p)
	}
	if !trusted[int(st.Uid)] {
		return "", fmt.Errorf("%s is a symbolic link owned by uid %d, which is neither root nor the JVM's user; it is not followed", p, st.Uid)
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", &os.PathError{Op: "readlink", Path: p, Err: err}
	}
	if n == 0 || n == len(buf) {
		return "", fmt.Errorf("%s: symbolic link target of unusable length", p)
	}
	return string(buf[:n]), nil
}

// checkTrustedDir checks one directory for openTrustedDir; pid is the target process, p names the directory.
func checkTrustedDir(pid, fd int, p string, trusted map[int]bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "stat", Path: p, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s is not a directory", p)
	case !trusted[int(st.Uid)]:
		return fmt.Errorf("%s is owned by uid %d, which is neither root nor the JVM's user; the copies are not placed under it", p, st.Uid)
	case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
		vol, err := podVolumeDir(pid, fd)
		if err != nil {
			return fmt.Errorf("%s is writable by group or others and not sticky (mode %o), and whether it is a pod's own volume cannot be told: %w",
				p, st.Mode&0o7777, err)
		}
		if vol == "" {
			return fmt.Errorf("%s is writable by group or others and not sticky (mode %o), and not the root of a pod's emptyDir volume; the copies are not placed under it",
				p, st.Mode&0o7777)
		}
	}
	return nil
}

// emptyDirRoot matches the root, within its filesystem, of the mount of a Kubernetes emptyDir volume on the
// node's disk: the kubelet's pods/<pod uid>/volumes/kubernetes.io~empty-dir/<volume name> directory.
var emptyDirRoot = regexp.MustCompile(`/pods/[0-9a-fA-F-]{1,64}/volumes/kubernetes\.io~empty-dir/[^/]+$`)

// podVolumeDir reports whether the directory fd, in the filesystem of process pid, is the root of a mount of a
// Kubernetes emptyDir volume in that process's mount namespace, as its mount table (/proc/<pid>/mountinfo)
// shows it: the directory is a mount root, and the mount's root within its filesystem is the kubelet's
// directory of an emptyDir volume. It returns that root, or "" when the directory is not one.
//
// The kubelet creates an emptyDir with mode 0777 and no sticky bit. Such a volume is writable only by the
// containers of its own pod that mount it, not by other pods or the node's users, so a copy placed in it is
// exposed to nobody outside the pod (see docs/jmx-attach.md, "A pod's own /tmp volume").
func podVolumeDir(pid, fd int) (string, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_SYNC_AS_STAT, unix.STATX_MNT_ID, &stx); err != nil {
		return "", fmt.Errorf("statx: %w", err)
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 || stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return "", fmt.Errorf("the kernel does not report mount ids (Linux 5.8 or later does)")
	}
	if stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return "", nil // a directory on the same mount as its parent
	}
	data, err := os.ReadFile(path.Join(procRoot, strconv.Itoa(pid), "mountinfo"))
	if err != nil {
		return "", procErr(pid, err)
	}
	m, ok := ParseMountInfo(data)[int(stx.Mnt_id)]
	if !ok {
		return "", fmt.Errorf("mount %d is not in the mount table of pid %d", stx.Mnt_id, pid)
	}
	if emptyDirRoot.MatchString(m.Root) {
		return m.Root, nil
	}
	return "", nil
}

// Mount is one line of /proc/<pid>/mountinfo.
type Mount struct {
	// ID is the mount's unique id.
	ID int
	// Root is the directory of the mounted filesystem that is mounted (for a bind mount, the directory bound).
	Root string
	// MountPoint is where it is mounted, relative to the reading process's root.
	MountPoint string
	// FSType is the filesystem type; Source the mount source; SuperOptions the filesystem's own options.
	FSType, Source, SuperOptions string
}

// ParseMountInfo parses the contents of /proc/<pid>/mountinfo into its mounts by id; malformed lines are
// skipped. Octal escapes (\040 for a space) are decoded.
func ParseMountInfo(data []byte) map[int]Mount {
	out := map[int]Mount{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 7 || sep < 0 || sep+2 >= len(f) {
			continue
		}
		id, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		m := Mount{ID: id, Root: unescapeMount(f[3]), MountPoint: unescapeMount(f[4]), FSType: f[sep+1], Source: unescapeMount(f[sep+2])}
		if sep+3 < len(f) {
			m.SuperOptions = f[sep+3]
		}
		out[id] = m
	}
	return out
}

// unescapeMount decodes the octal escapes (\ooo) of a mountinfo field.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
