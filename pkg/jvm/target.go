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

// openTargetRoot opens the root directory of process pid. A process that is gone is an error wrapping
// ErrProcessGone; any other failure is ReasonRootInaccessible (rootError).
func openTargetRoot(pid int) (*targetRoot, error) {
	var fd int
	err := asProcessFSUser(pid, func() error {
		var err error
		fd, err = unix.Open(path.Join(procRoot, strconv.Itoa(pid), "root"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, rootError(pid, err)
	}
	return &targetRoot{pid: pid, fd: fd}, nil
}

// rootError classifies a failure to open /proc/<pid>/root: the process is gone (ENOENT, ESRCH), or its root
// cannot be opened by this process (ReasonRootInaccessible): permission (a security module, or credentials
// that may read the JVM's maps but not follow its root), or a root directory that is not a directory.
func rootError(pid int, err error) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("open root of pid %d: %w", pid, ErrProcessGone)
	}
	return &AttachError{Reason: ReasonRootInaccessible, Msg: fmt.Sprintf(
		"the root directory of pid %d (/proc/%d/root) cannot be opened by this process, so nothing can be placed in its filesystem", pid, pid), Err: err}
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
	data, _, err := r.readFileOwner(p, limit)
	return data, err
}

// readFileOwner reads at most limit bytes of the regular file p and returns its owner's uid as well.
func (r *targetRoot) readFileOwner(p string, limit int64) ([]byte, int, error) {
	fd, err := r.open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, -1, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, -1, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, -1, fmt.Errorf("%s: not a regular file", p)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit))
	return data, int(st.Uid), err
}

// writeFile atomically places data at dir/name inside the target, owned by uid:gid with mode 0644; dir must
// exist. The temporary file is created with O_EXCL and the rename replaces whatever had the name, so nothing a
// local user planted at either name is written through.
func (r *targetRoot) writeFile(dir, name string, data []byte, uid, gid int) (string, error) {
	if name == "" || strings.Contains(name, "/") || name == "." || name == ".." {
		return "", fmt.Errorf("invalid file name %q", name)
	}
	dfd, err := r.open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
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

// CopyToTarget copies the local files into a new directory under dir in the filesystem that process pid sees,
// and returns the copies' paths as the target sees them, in the order given. The directory and its safety
// checks are the ones Inject uses (see docs/jmx-attach.md): a fresh directory with a random name, created under
// a parent whose every component is a real directory that only root or the process's user can change, mode
// 0700 and owned by the process's filesystem uid and gid; the files are read-only and verified after the copy.
// Paths are resolved inside the target's root through /proc/<pid>/root, which works across mount namespaces.
func CopyToTarget(pid int, dir string, files ...string) ([]string, error) {
	st, err := readStatus(pid)
	if err != nil {
		return nil, err
	}
	contents := make([]namedData, 0, len(files))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("copy to pid %d: %w", pid, err)
		}
		contents = append(contents, namedData{name: path.Base(file), data: data})
	}
	d, paths, err := copyToTarget(pid, dir, st.UID[3], st.GID[3], contents...)
	if err != nil {
		return nil, err
	}
	d.close()
	return paths, nil
}

// namedData is the content of a file to copy and the name it gets.
type namedData struct {
	name string
	data []byte
}

// copyToTarget creates an agentDir under dir in the target's filesystem, writes the files into it, gives it to
// uid:gid and verifies it. The caller closes the returned agentDir, or removes it when the copies are not used.
func copyToTarget(pid int, dir string, uid, gid int, files ...namedData) (*agentDir, []string, error) {
	root, err := openTargetRoot(pid)
	if err != nil {
		return nil, nil, err
	}
	d, err := createAgentDir(root, dir, uid, gid)
	if err != nil {
		root.Close()
		return nil, nil, fmt.Errorf("copy to pid %d: %w", pid, err)
	}
	fail := func(err error) (*agentDir, []string, error) {
		_ = d.remove()
		d.close()
		return nil, nil, fmt.Errorf("copy to pid %d: %w", pid, err)
	}
	paths := make([]string, 0, len(files))
	for _, f := range files {
		p, err := d.writeFile(f.name, f.data)
		if err != nil {
			return fail(err)
		}
		paths = append(paths, p)
	}
	if err := d.seal(); err != nil {
		return fail(err)
	}
	if err := d.verify(); err != nil {
		return fail(err)
	}
	return d, paths, nil
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
