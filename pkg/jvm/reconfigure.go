package jvm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// Reconfigure replaces the exporter configuration of the agent that Inject loaded into pid with config, and
// reports the result; like Inject it never returns a Go error. jmx_exporter reads its configuration file again
// when the file changes (it looks at each scrape), so the new configuration takes effect at the next scrape,
// without a restart. In order, it:
//
//  1. validates config exactly as Inject does (ValidateExporterConfig, with WithExtraConfigKeys): a bad
//     configuration never reaches the agent (ReasonConfigInvalid);
//  2. takes the JVM's lock (as Inject does) and reads the marker of the earlier injection; without one the JVM
//     gets ReasonNotInjected;
//  3. checks the configuration file the marker names as the copies are verified before a load: its directory
//     must be an AgentDirPrefix<16 hex digits> directory under a parent whose every component is a real
//     directory only root or the JVM's user can change, owned by the JVM's user with mode 0700, and the file a
//     regular, read-only (0444) file with one link owned by root, the JVM's user or this process's user;
//     otherwise ReasonCopyFailed and nothing is written;
//  4. leaves a file that already holds config alone (OutcomeUnchanged); otherwise writes a new 0444 file with
//     O_EXCL beside it and renames it over the old one, so the agent reads either the old or the new file,
//     never a partial one (OutcomeOK).
//
// The result's Port is the agent's port from the marker: the port of a running agent cannot change, so an
// httpServer or port change in config does not apply until the JVM restarts.
func (in *Injector) Reconfigure(ctx context.Context, pid int, config []byte) InjectResult {
	res := InjectResult{PID: pid}
	fail := func(err error) InjectResult {
		res.Status = OutcomeError
		res.Reason = ReasonOf(err)
		res.Message = err.Error()
		return res
	}
	j, err := Inspect(pid)
	if err != nil {
		return fail(err)
	}
	res.NSPID, res.MainClass, res.JavaVersion, res.StartedAt = j.NSPID, j.MainClass, j.JavaVersion, j.StartTime
	if len(config) > maxConfigSize {
		return fail(&AttachError{Reason: ReasonConfigInvalid, Msg: fmt.Sprintf("exporter config is %d bytes, at most %d", len(config), maxConfigSize)})
	}
	if err := ValidateExporterConfig(config, in.extraKeys...); err != nil {
		return fail(&AttachError{Reason: ReasonConfigInvalid, Msg: "exporter config", Err: err})
	}
	lock, err := lockJVM(ctx, j, in.lockWait())
	if err != nil {
		return fail(err)
	}
	defer lock.unlock()
	m, ok := readMarker(j)
	if !ok {
		return fail(&AttachError{Reason: ReasonNotInjected, Msg: fmt.Sprintf(
			"pid %d has no marker of an earlier injection by root or its user; nothing to reconfigure", pid)})
	}
	res.Port, res.AgentPath, res.ConfigPath = m.Port, m.AgentPath, m.ConfigPath
	changed, err := replaceConfig(j, m.ConfigPath, config)
	if err != nil {
		return fail(&AttachError{Reason: ReasonCopyFailed, Msg: "replace the agent's config", Err: err})
	}
	if !changed {
		res.Status = OutcomeUnchanged
		res.Message = fmt.Sprintf("config %s already holds these bytes; not rewritten (agent on port %d)", m.ConfigPath, m.Port)
		return res
	}
	res.Status = OutcomeOK
	res.Message = fmt.Sprintf("config %s replaced; the agent on port %d reads it at its next scrape", m.ConfigPath, m.Port)
	return res
}

// isAgentDirName reports whether name is a directory name mkdirRandom makes.
func isAgentDirName(name string) bool {
	suffix, ok := strings.CutPrefix(name, AgentDirPrefix)
	if !ok || len(suffix) != 16 {
		return false
	}
	_, err := hex.DecodeString(suffix)
	return err == nil && strings.ToLower(suffix) == suffix
}

// replaceConfig replaces the file configPath, in the filesystem of JVM j, with data, after checking it as
// Reconfigure describes; it reports whether it wrote anything.
func replaceConfig(j JVM, configPath string, data []byte) (bool, error) {
	p := path.Clean(configPath)
	if !path.IsAbs(p) || p != configPath {
		return false, fmt.Errorf("config path %q in the marker is not a clean absolute path", configPath)
	}
	dir, name := path.Split(p)
	dir = path.Clean(dir)
	parent, dirName := path.Split(dir)
	if !isAgentDirName(dirName) {
		return false, fmt.Errorf("%s is not in a %s<random> directory", p, AgentDirPrefix)
	}
	root, err := openTargetRoot(j.PID)
	if err != nil {
		return false, err
	}
	defer root.Close()
	trusted, err := trustedOwners(root, j.FSUID)
	if err != nil {
		return false, err
	}
	pfd, err := openTrustedDir(root, path.Clean(parent), trusted)
	if err != nil {
		return false, err
	}
	defer unix.Close(pfd)
	dfd, err := unix.Openat(pfd, dirName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	var dst unix.Stat_t
	if err := unix.Fstat(dfd, &dst); err != nil {
		return false, err
	}
	if int(dst.Uid) != j.FSUID || dst.Mode&0o7777 != agentDirMode {
		return false, fmt.Errorf("%s is not the JVM user's private directory (uid %d, mode %o)", dir, dst.Uid, dst.Mode&0o7777)
	}
	old, err := readCopy(dfd, p, name, trusted)
	if err != nil {
		return false, err
	}
	if bytes.Equal(old, data) {
		return false, nil
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return false, err
	}
	tmp := "." + name + "." + hex.EncodeToString(b[:])
	fd, err := unix.Openat(dfd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return false, &os.PathError{Op: "create", Path: path.Join(dir, tmp), Err: err}
	}
	f := os.NewFile(uintptr(fd), path.Join(dir, tmp))
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(agentFileMode)
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
		return false, fmt.Errorf("write %s: %w", p, werr)
	}
	return true, nil
}

// readCopy reads the copied file name in the directory dirfd after checking it: a regular file with one link,
// mode 0444, owned by a trusted uid, no larger than maxConfigSize.
func readCopy(dirfd int, p, name string, trusted map[int]bool) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || !trusted[int(st.Uid)] || st.Mode&0o7777 != agentFileMode {
		return nil, fmt.Errorf("%s is not a copy jmx-attach wrote (mode %o, uid %d, %d links)", p, st.Mode, st.Uid, st.Nlink)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return data, nil
}
