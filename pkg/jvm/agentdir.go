package jvm

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// AgentDirPrefix begins the name of the directory each injection creates for its copies of the agent jar and
// config; the rest of the name is random.
const AgentDirPrefix = "handlerkit-jmx-"

// agentDirTries bounds the attempts to find an unused random directory name.
const agentDirTries = 8

// Modes of the copies: the directory is the JVM user's alone; the files can be read by the JVM whatever user
// owns them, and written by nobody but root.
const (
	agentDirMode  = 0o700
	agentFileMode = 0o444
)

// agentDir is a directory that one injection created, under a verified parent, in the target's filesystem, and
// the files it wrote into it. Nothing in it is trusted because of its name: it is held open from its creation,
// and verify checks that the path the JVM will open still leads to it and to the very bytes written.
//
// The threat it answers is a local user of the target's filesystem who can write its /tmp: such a user could
// pre-create a directory at a predictable path, or plant a symbolic link there, and swap the jar between the
// copy and the load, so that their code runs in the JVM (which may be root's). Therefore:
//
//   - every directory of the parent path must be owned by root, the JVM's user or the owner of the target's
//     root directory, and writable by nobody else unless it is sticky (as /tmp is: others can then neither
//     rename nor remove what is not theirs) or the root of the pod's own emptyDir volume; a symbolic link on
//     the way is followed inside the target's root only when such an owner made it, and the copies get the
//     real path (openTrustedDir);
//   - the directory has a random name and is created with mkdirat, which fails on anything already there, so
//     an existing directory is never used;
//   - it has mode 0700 and is given to the JVM's user once the files are written; the files are created with
//     O_EXCL, have mode 0444 and stay owned by the injector (root), so only root and the JVM's user, who owns
//     the JVM anyway, can change anything in it.
type agentDir struct {
	// root is the target's root, owned by the agentDir.
	root *targetRoot
	// parent is the parent directory as the target sees it; name is the created directory's name in it.
	parent, name string
	// parentFd (O_PATH) and fd (O_RDONLY) are held from creation; removal goes through them.
	parentFd, fd int
	// uid and gid receive the directory: the JVM's filesystem ids.
	uid, gid int
	// trusted are the uids that may own a component of the parent path.
	trusted map[int]bool
	files   []agentFile
}

// agentFile is a file written into an agentDir and the SHA-256 of what was written.
type agentFile struct {
	name   string
	size   int64
	digest [sha256.Size]byte
}

// createAgentDir creates a new directory with a random name under parent in the target's filesystem, after
// checking every component of parent. uid and gid are the JVM's filesystem ids.
func createAgentDir(root *targetRoot, parent string, uid, gid int) (*agentDir, error) {
	if !path.IsAbs(parent) {
		return nil, fmt.Errorf("target directory %q is not absolute", parent)
	}
	trusted, err := trustedOwners(root, uid)
	if err != nil {
		return nil, err
	}
	// The copies go under the parent's real path: the JVM is given a path without symbolic links.
	pfd, parent, err := openTrustedDir(root, path.Clean(parent), trusted)
	if err != nil {
		return nil, err
	}
	name, err := mkdirRandom(pfd, parent)
	if err != nil {
		unix.Close(pfd)
		return nil, err
	}
	d := &agentDir{root: root, parent: parent, name: name, parentFd: pfd, fd: -1, uid: uid, gid: gid, trusted: trusted}
	if err := d.open(); err != nil {
		_ = unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
		unix.Close(pfd)
		return nil, err
	}
	return d, nil
}

// mkdirRandom creates a directory AgentDirPrefix<random> with mode 0700 in dirfd and returns its name. A name
// that exists, whatever it is, is skipped: mkdirat does not follow or reuse anything.
func mkdirRandom(dirfd int, parent string) (string, error) {
	for range agentDirTries {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		name := AgentDirPrefix + hex.EncodeToString(b[:])
		err := unix.Mkdirat(dirfd, name, agentDirMode)
		if err == nil {
			return name, nil
		}
		if err != unix.EEXIST {
			return "", &os.PathError{Op: "mkdir", Path: path.Join(parent, name), Err: err}
		}
	}
	return "", fmt.Errorf("mkdir in %s: %d random names were all taken", parent, agentDirTries)
}

// open opens the directory just created and checks that it is the one this process made: a directory, owned
// by this process's effective uid, empty. A hostile user cannot have swapped it: the parent is writable only
// by trusted users, or sticky, and the new directory belongs to this process.
func (d *agentDir) open() error {
	fd, err := unix.Openat(d.parentFd, d.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: d.dir(), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Nlink != 2 {
		unix.Close(fd)
		return fmt.Errorf("%s: not the directory this process created (mode %o, uid %d, %d links)", d.dir(), st.Mode, st.Uid, st.Nlink)
	}
	if err := unix.Fchmod(fd, agentDirMode); err != nil {
		unix.Close(fd)
		return fmt.Errorf("chmod %s: %w", d.dir(), err)
	}
	d.fd = fd
	return nil
}

// dir returns the directory's path as the target sees it.
func (d *agentDir) dir() string { return path.Join(d.parent, d.name) }

// path returns the path of file name in the directory as the target sees it.
func (d *agentDir) path(name string) string { return path.Join(d.dir(), name) }

// writeFile creates name in the directory with data, read-only for everybody, and records its digest.
func (d *agentDir) writeFile(name string, data []byte) (string, error) {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return "", fmt.Errorf("invalid file name %q", name)
	}
	fd, err := unix.Openat(d.fd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return "", &os.PathError{Op: "create", Path: d.path(name), Err: err}
	}
	f := os.NewFile(uintptr(fd), d.path(name))
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(agentFileMode)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = unix.Unlinkat(d.fd, name, 0)
		return "", fmt.Errorf("write %s: %w", d.path(name), werr)
	}
	d.files = append(d.files, agentFile{name: name, size: int64(len(data)), digest: sha256.Sum256(data)})
	return d.path(name), nil
}

// seal gives the directory to the JVM's user, once every file is in it, so that the JVM can read them.
func (d *agentDir) seal() error {
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return err
	}
	if int(st.Uid) == d.uid && int(st.Gid) == d.gid {
		return nil // an injector running as the JVM's own user, which may not chown at all
	}
	if err := unix.Fchown(d.fd, d.uid, d.gid); err != nil {
		return fmt.Errorf("chown %s to %d:%d: %w", d.dir(), d.uid, d.gid, err)
	}
	return nil
}

// verify checks, right before the JVM is told to load the jar, that the path the JVM will open leads to the
// directory created here, that it is still the JVM user's with mode 0700, and that every file still holds the
// bytes written (same SHA-256), is read-only and has no other name.
func (d *agentDir) verify() error {
	pfd, real, err := openTrustedDir(d.root, d.parent, d.trusted)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if real != d.parent {
		return fmt.Errorf("%s now leads to %s through a symbolic link", d.parent, real)
	}
	fd, err := unix.Openat(pfd, d.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: d.dir(), Err: err}
	}
	defer unix.Close(fd)
	var held, now unix.Stat_t
	if err := unix.Fstat(d.fd, &held); err != nil {
		return err
	}
	if err := unix.Fstat(fd, &now); err != nil {
		return err
	}
	switch {
	case held.Dev != now.Dev || held.Ino != now.Ino:
		return fmt.Errorf("%s was replaced after it was created", d.dir())
	case int(now.Uid) != d.uid || now.Mode&0o7777 != agentDirMode:
		return fmt.Errorf("%s changed owner or mode (uid %d, mode %o)", d.dir(), now.Uid, now.Mode&0o7777)
	}
	for _, f := range d.files {
		if err := verifyFile(fd, d.path(f.name), f); err != nil {
			return err
		}
	}
	return nil
}

// verifyFile checks one file of an agentDir against what was written.
func verifyFile(dirfd int, p string, want agentFile) error {
	fd, err := unix.Openat(dirfd, want.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || int(st.Uid) != os.Geteuid() ||
		st.Mode&0o7777 != agentFileMode || st.Size != want.size {
		return fmt.Errorf("%s changed after it was written (mode %o, uid %d, %d links, %d bytes)", p, st.Mode, st.Uid, st.Nlink, st.Size)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, want.size+1)); err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	if got := h.Sum(nil); string(got) != string(want.digest[:]) {
		return fmt.Errorf("%s does not hold the bytes written (SHA-256 %x, want %x)", p, got, want.digest)
	}
	return nil
}

// remove removes the files and the directory; it is used when the JVM did not load the agent.
func (d *agentDir) remove() error {
	var errs []error
	for _, f := range d.files {
		if err := unix.Unlinkat(d.fd, f.name, 0); err != nil && err != unix.ENOENT {
			errs = append(errs, &os.PathError{Op: "remove", Path: d.path(f.name), Err: err})
		}
	}
	if err := unix.Unlinkat(d.parentFd, d.name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		errs = append(errs, &os.PathError{Op: "remove", Path: d.dir(), Err: err})
	}
	return errors.Join(errs...)
}

// close releases the descriptors and the target's root; the directory stays.
func (d *agentDir) close() {
	if d.root != nil {
		d.root.Close()
		d.root = nil
	}
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
	if d.parentFd >= 0 {
		unix.Close(d.parentFd)
		d.parentFd = -1
	}
}

// trustedOwners returns the uids that may own a directory on the way to the copies: root, the JVM's user (who
// can change its own JVM anyway), this process, and the owner of the target's root directory, who can rename
// every top-level directory and so controls every path in that filesystem already (in a container run in a
// user namespace it is the container's root).
func trustedOwners(root *targetRoot, uid int) (map[int]bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(root.fd, &st); err != nil {
		return nil, fmt.Errorf("stat the root of pid %d: %w", root.pid, err)
	}
	return map[int]bool{0: true, uid: true, os.Geteuid(): true, int(st.Uid): true}, nil
}
