package jvm

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

var errESRCH = syscall.ESRCH

// targetRoot is the root directory of a process's mount namespace, opened through /proc/<pid>/root. Every path
// below it is resolved with RESOLVE_IN_ROOT, so ".." and absolute symbolic links stay inside the target's
// filesystem, and with RESOLVE_NO_MAGICLINKS, so /proc/self links inside the target cannot lead out of it.
type targetRoot struct {
	pid int
	fd  int
}

func openTargetRoot(pid int) (*targetRoot, error) {
	fd, err := unix.Open(path.Join(procRoot, strconv.Itoa(pid), "root"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("open root of pid %d: %w", pid, ErrProcessGone)
		}
		return nil, fmt.Errorf("open root of pid %d: %w", pid, err)
	}
	return &targetRoot{pid: pid, fd: fd}, nil
}

// Close closes the root descriptor.
func (r *targetRoot) Close() error { return unix.Close(r.fd) }

// open opens p (absolute or relative, always taken inside the target's root).
func (r *targetRoot) open(p string, flags int, mode uint32) (int, error) {
	rel := strings.TrimLeft(path.Clean("/"+p), "/")
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	}
	if flags&unix.O_CREAT == 0 {
		how.Mode = 0
	}
	for {
		fd, err := unix.Openat2(r.fd, rel, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: p, Err: err}
		}
		return fd, nil
	}
}

// readFile reads at most limit bytes of p.
func (r *targetRoot) readFile(p string, limit int64) ([]byte, error) {
	fd, err := r.open(p, unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: not a regular file", p)
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// mkdirAll creates dir and its missing parents inside the target, giving directories it creates to uid:gid
// with mode 0755, and returns an O_PATH descriptor of dir.
func (r *targetRoot) mkdirAll(dir string, uid, gid int) (int, error) {
	clean := path.Clean("/" + dir)
	parts := strings.Split(strings.TrimPrefix(clean, "/"), "/")
	cur := "/"
	for _, part := range parts {
		if part == "" {
			continue
		}
		parent, err := r.open(cur, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return -1, err
		}
		err = unix.Mkdirat(parent, part, 0o755)
		if err == nil {
			// A new directory: hand it to the target's user so that the JVM can read what goes in it.
			if err2 := fchownatPath(parent, part, uid, gid); err2 != nil {
				unix.Close(parent)
				return -1, err2
			}
			if err2 := unix.Fchmodat(parent, part, 0o755, 0); err2 != nil {
				unix.Close(parent)
				return -1, fmt.Errorf("chmod %s: %w", path.Join(cur, part), err2)
			}
		}
		unix.Close(parent)
		if err != nil && err != unix.EEXIST {
			return -1, &os.PathError{Op: "mkdir", Path: path.Join(cur, part), Err: err}
		}
		cur = path.Join(cur, part)
	}
	return r.open(clean, unix.O_PATH|unix.O_DIRECTORY, 0)
}

func fchownatPath(dirfd int, name string, uid, gid int) error {
	if err := unix.Fchownat(dirfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown %s to %d:%d: %w", name, uid, gid, err)
	}
	return nil
}

// writeFile atomically places data at dir/name inside the target, owned by uid:gid with mode 0644. The rename
// matters: a JVM that already loaded an earlier jar at that path keeps its open file instead of reading a file
// that changes under it.
func (r *targetRoot) writeFile(dir, name string, data []byte, uid, gid int) (string, error) {
	if name == "" || strings.Contains(name, "/") || name == "." || name == ".." {
		return "", fmt.Errorf("invalid file name %q", name)
	}
	dfd, err := r.mkdirAll(dir, uid, gid)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	tmp := fmt.Sprintf(".%s.tmp%d", name, os.Getpid())
	_ = unix.Unlinkat(dfd, tmp, 0)
	fd, err := unix.Openat(dfd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", &os.PathError{Op: "create", Path: path.Join(dir, tmp), Err: err}
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, werr := f.Write(data)
	if werr == nil {
		werr = unix.Fchown(fd, uid, gid)
	}
	if werr == nil {
		werr = unix.Fchmod(fd, 0o644)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = unix.Renameat(dfd, tmp, dfd, name)
	}
	if werr != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return "", fmt.Errorf("write %s: %w", path.Join(dir, name), werr)
	}
	return path.Join(path.Clean("/"+dir), name), nil
}

// remove removes p inside the target; a missing file is not an error.
func (r *targetRoot) remove(p string) error {
	dfd, err := r.open(path.Dir(path.Clean("/"+p)), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Unlinkat(dfd, path.Base(p), 0); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "remove", Path: p, Err: err}
	}
	return nil
}

// CopyToTarget copies the local files into directory dir of the filesystem that process pid sees, owned by the
// process's filesystem uid and gid so that the JVM can read them. It returns the copied files' paths as the
// target sees them, in the order given. Paths are resolved inside the target's root through /proc/<pid>/root,
// which works across mount namespaces; symbolic links in the target cannot lead outside it.
func CopyToTarget(pid int, dir string, files ...string) ([]string, error) {
	j, err := Inspect(pid)
	if err != nil && !errors.Is(err, ErrNotJVM) {
		return nil, err
	}
	uid, gid := j.FSUID, j.FSGID
	if errors.Is(err, ErrNotJVM) {
		st, err := readStatus(pid)
		if err != nil {
			return nil, err
		}
		uid, gid = st.UID[3], st.GID[3]
	}
	return copyToTarget(pid, dir, uid, gid, files...)
}

func copyToTarget(pid int, dir string, uid, gid int, files ...string) ([]string, error) {
	if !path.IsAbs(dir) {
		return nil, fmt.Errorf("copy to pid %d: target directory %q is not absolute", pid, dir)
	}
	root, err := openTargetRoot(pid)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	out := make([]string, 0, len(files))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("copy to pid %d: %w", pid, err)
		}
		p, err := root.writeFile(dir, path.Base(file), data, uid, gid)
		if err != nil {
			return nil, fmt.Errorf("copy to pid %d: %w", pid, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func readStatus(pid int) (Status, error) {
	data, err := os.ReadFile(path.Join(procRoot, strconv.Itoa(pid), "status"))
	if err != nil {
		return Status{}, procErr(pid, err)
	}
	return ParseStatus(data)
}

func readStat(pid int) (Stat, error) {
	data, err := os.ReadFile(path.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return Stat{}, procErr(pid, err)
	}
	return ParseStat(data)
}
