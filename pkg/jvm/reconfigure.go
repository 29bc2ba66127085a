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
	"time"

	"golang.org/x/sys/unix"
)

// Reconfigure replaces the exporter configuration of the agent that Inject loaded into pid with config, and
// reports the agent's verdict; like Inject it never returns a Go error. The agent (this project's, and
// jmx_exporter's own) reads its configuration file again when the file changes, without a restart. In order,
// it:
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
//  4. leaves a file that already holds config alone; otherwise writes a new 0444 file with O_EXCL beside it
//     and renames it over the old one, so the agent reads either the old or the new file, never a partial one;
//  5. when the agent reports its state (AgentStatusFile beside the config), waits up to the reload timeout
//     (WithReloadTimeout) for its verdict on these very bytes (their SHA-256): serving them is OutcomeOK
//     (OutcomeUnchanged when the file held them already), with the agent's restartRequired text in Note; a
//     reload it refused is ReasonConfigRejected with its message, the old configuration staying in force. An
//     agent that writes no status (jmx_exporter's own) gets OutcomeOK or OutcomeUnchanged once the file is
//     written, as it reads it at its next scrape.
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
	if in.container != nil && !in.container.Contains(pid) {
		return fail(notInContainer(in.container, pid))
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
	if user, ok := in.otherUser(j); ok {
		return in.runAsUser(ctx, UserRequest{Reconfigure: true, JVM: j, User: user, Config: config}, res)
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
	return in.reconfigure(ctx, j, m.ConfigPath, config, res)
}

// reconfigure is Reconfigure for a JVM whose lock is held and whose marker names configPath: steps 3 to 5.
func (in *Injector) reconfigure(ctx context.Context, j JVM, configPath string, config []byte, res InjectResult) InjectResult {
	fail := func(err error) InjectResult {
		res.Status = OutcomeError
		res.Reason = ReasonOf(err)
		res.Message = err.Error()
		return res
	}
	cd, err := openCopiesDir(j, configPath)
	if err != nil {
		if r := ReasonOf(err); r != ReasonRootInaccessible && r != ReasonProcessGone {
			err = &AttachError{Reason: ReasonCopyFailed, Msg: "replace the agent's config", Err: err}
		}
		return fail(err)
	}
	defer cd.close()
	changed, err := cd.replace(config)
	if err != nil {
		return fail(&AttachError{Reason: ReasonCopyFailed, Msg: "replace the agent's config", Err: err})
	}
	st, found, err := in.waitVerdict(ctx, j, cd, configDigest(config))
	if err != nil {
		return fail(err)
	}
	switch {
	case !found && !changed:
		res.Status = OutcomeUnchanged
		res.Message = fmt.Sprintf("config %s already holds these bytes; not rewritten (agent on port %d)", configPath, res.Port)
	case !found:
		res.Status = OutcomeOK
		res.Message = fmt.Sprintf("config %s replaced; the agent on port %d reads it at its next scrape", configPath, res.Port)
	case !changed:
		res.Status = OutcomeUnchanged
		res.Message = fmt.Sprintf("the agent on port %d already serves this config (SHA-256 %.12s); not rewritten", res.Port, st.ConfigSHA256)
		res.Note = st.RestartRequired
	default:
		res.Status = OutcomeOK
		res.Message = fmt.Sprintf("config %s replaced; the agent on port %d serves it (SHA-256 %.12s)", configPath, res.Port, st.ConfigSHA256)
		res.Note = st.RestartRequired
	}
	return res
}

// reloadPoll bounds the interval at which waitVerdict reads the agent's status.
const reloadPoll = 200 * time.Millisecond

// waitVerdict waits up to the reload timeout for the agent's verdict on the config whose digest is sum. found
// is false when the agent keeps no status file (jmx_exporter's own agent): there is no verdict to wait for.
// The agent serving that config is a success; a reload of it that failed is ReasonConfigRejected with the
// agent's message; a JVM that ended is ReasonProcessGone; no verdict in time is ReasonInternal.
func (in *Injector) waitVerdict(ctx context.Context, j JVM, cd *copiesDir, sum string) (AgentStatus, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, in.reloadTimeout)
	defer cancel()
	for delay := 20 * time.Millisecond; ; delay = min(delay*2, reloadPoll) {
		st, found, err := readAgentStatus(cd.fd, cd.dir, j.FSUID)
		switch {
		case err != nil:
			return st, found, &AttachError{Reason: ReasonInternal, Msg: "the agent's status cannot be trusted", Err: err}
		case !found:
			return st, false, nil
		case st.State == AgentServing && st.ConfigSHA256 == sum:
			return st, true, nil
		case st.Reload != nil && st.Reload.ConfigSHA256 == sum && !st.Reload.OK:
			msg := st.Reload.Message
			if msg == "" {
				msg = "no message"
			}
			return st, true, &AttachError{Reason: ReasonConfigRejected, Msg: fmt.Sprintf(
				"the agent in pid %d refused the new config and keeps serving the one with SHA-256 %.12s: %s", j.PID, st.ConfigSHA256, msg)}
		}
		if err := sleepCtx(ctx, delay); err != nil {
			if gone := (&attacher{jvm: j}).goneError(); gone != nil {
				return st, true, gone
			}
			return st, true, &AttachError{Reason: ReasonInternal, Msg: fmt.Sprintf(
				"the agent in pid %d did not report on the new config (SHA-256 %.12s) within %s", j.PID, sum, in.reloadTimeout)}
		}
	}
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

// copiesDir is the copies' directory of an earlier injection, opened and checked as Reconfigure describes (step
// 3) for replacing its config file.
type copiesDir struct {
	// dir is the directory's path in the JVM's filesystem; name is the config file's name in it; p its path.
	dir, name, p string
	// fd is the directory, open.
	fd      int
	trusted map[int]bool
}

func (cd *copiesDir) close() { unix.Close(cd.fd) }

// openCopiesDir opens the directory of configPath, in the filesystem of JVM j, after checking it.
func openCopiesDir(j JVM, configPath string) (*copiesDir, error) {
	p := path.Clean(configPath)
	if !path.IsAbs(p) || p != configPath {
		return nil, fmt.Errorf("config path %q in the marker is not a clean absolute path", configPath)
	}
	dir, name := path.Split(p)
	dir = path.Clean(dir)
	parent, dirName := path.Split(dir)
	if !isAgentDirName(dirName) {
		return nil, fmt.Errorf("%s is not in a %s<random> directory", p, AgentDirPrefix)
	}
	root, err := openTargetRoot(j.PID)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	trusted, err := trustedOwners(root, j.FSUID)
	if err != nil {
		return nil, err
	}
	pfd, real, err := openTrustedDir(root, path.Clean(parent), trusted)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	if real != path.Clean(parent) {
		return nil, fmt.Errorf("%s leads to %s through a symbolic link; the copies are never placed behind one", path.Clean(parent), real)
	}
	dfd, err := unix.Openat(pfd, dirName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	var dst unix.Stat_t
	if err := unix.Fstat(dfd, &dst); err != nil {
		unix.Close(dfd)
		return nil, err
	}
	if int(dst.Uid) != j.FSUID || dst.Mode&0o7777 != agentDirMode {
		unix.Close(dfd)
		return nil, fmt.Errorf("%s is not the JVM user's private directory (uid %d, mode %o)", dir, dst.Uid, dst.Mode&0o7777)
	}
	return &copiesDir{dir: dir, name: name, p: p, fd: dfd, trusted: trusted}, nil
}

// current returns the config file's bytes, after checking the file (readCopy).
func (cd *copiesDir) current() ([]byte, error) {
	return readCopy(cd.fd, cd.p, cd.name, cd.trusted)
}

// replace replaces the config file with data, unless it holds data already; it reports whether it wrote.
func (cd *copiesDir) replace(data []byte) (bool, error) {
	old, err := cd.current()
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
	tmp := "." + cd.name + "." + hex.EncodeToString(b[:])
	fd, err := unix.Openat(cd.fd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return false, &os.PathError{Op: "create", Path: path.Join(cd.dir, tmp), Err: err}
	}
	f := os.NewFile(uintptr(fd), path.Join(cd.dir, tmp))
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
		werr = unix.Renameat(cd.fd, tmp, cd.fd, cd.name)
	}
	if werr != nil {
		_ = unix.Unlinkat(cd.fd, tmp, 0)
		return false, fmt.Errorf("write %s: %w", cd.p, werr)
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
