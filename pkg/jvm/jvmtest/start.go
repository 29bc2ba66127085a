package jvmtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// defaultReadyTimeout is how long Start waits for the sample application's ready line; a JVM starts in about a
// second, but two shared cores under a parallel test run can make that much slower.
const defaultReadyTimeout = 60 * time.Second

// stopGrace is how long Stop lets the JVM run its shutdown hooks (which remove its hsperfdata and attach socket)
// before it is killed.
const stopGrace = 3 * time.Second

// Options configure a JVM started by Start or StartJVM.
type Options struct {
	// App is the application to run; required (see BuildSampleApp).
	App App
	// Java is the java launcher to run. Default: "java" from PATH.
	Java string
	// JVMArgs are extra JVM options placed before the main class, for example "-XX:+DisableAttachMechanism".
	JVMArgs []string
	// Credential runs the JVM as another user. The JVM's working directory is made accessible to that user.
	Credential *syscall.Credential
	// PrivateNamespaces starts the JVM in its own PID and mount namespaces with a private /tmp (a bind mount of
	// the JVM's working directory), so its pid inside its namespace (1) differs from its host pid and its /tmp
	// differs from the host's.
	PrivateNamespaces bool
	// PrivateNetwork also gives the JVM its own network namespace with only a loopback interface; it requires
	// PrivateNamespaces. Its ports are then reachable only from inside that namespace.
	PrivateNetwork bool
	// Env is added to the JVM's environment (which otherwise is this process's environment).
	Env []string
	// Files are written into the JVM's working directory before it starts, readable by every user: for example
	// an @argfile named on the command line relative to the working directory.
	Files map[string][]byte
	// ReadyTimeout bounds the wait for the application's ready line. Default: 60s.
	ReadyTimeout time.Duration
	// DefaultCompilers runs the JVM with the JDK's default JIT compilers and collector: without it, Start puts
	// LightFlags before JVMArgs (leaving out -XX:+UseSerialGC when JVMArgs choose a collector).
	DefaultCompilers bool
}

// LightFlags are the JVM options Start gives a JVM unless Options.DefaultCompilers is set: the client compiler
// only and the serial collector. A test JVM lives for seconds, in which the default server compiler and the G1
// collector's threads cost about twice the CPU (measured on JDK 17: a sample application that loads the agent
// at start and is scraped six times, 2.0 to 2.5 CPU seconds by default against 1.0 to 1.2 with these), and
// nothing the tests check depends on them: attaching, agent loading, MBeans and metrics work the same. The
// end-to-end tests' pods run their JVMs with the same options.
var LightFlags = []string{"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"}

// jvmOptions is the JVM's option list for opts: LightFlags (unless DefaultCompilers; without the collector
// when JVMArgs choose one, since two collectors stop the JVM) and then JVMArgs, which so override them.
func jvmOptions(opts Options) []string {
	var args []string
	if !opts.DefaultCompilers {
		choosesGC := false
		for _, a := range opts.JVMArgs {
			if strings.HasPrefix(a, "-XX:+Use") && strings.HasSuffix(a, "GC") {
				choosesGC = true
			}
		}
		for _, f := range LightFlags {
			if f == "-XX:+UseSerialGC" && choosesGC {
				continue
			}
			args = append(args, f)
		}
	}
	return append(args, opts.JVMArgs...)
}

// JVM is a running sample application.
type JVM struct {
	// Pid is the JVM's process id as seen from this process.
	Pid int
	// WorkDir is the host path of the JVM's working directory (its /tmp too with PrivateNamespaces).
	WorkDir string
	// ClassPath is the class path the JVM was started with, as the JVM sees it.
	ClassPath string

	cmd     *exec.Cmd
	private bool
	out     *lockedBuffer
	exited  chan struct{}
	waitErr error
	stop    sync.Once
}

// StartJVM starts a JVM for a test, fails the test if it cannot, and stops it in t.Cleanup.
func StartJVM(t testing.TB, opts Options) *JVM {
	t.Helper()
	j, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("start JVM: %v", err)
	}
	t.Cleanup(func() {
		if err := j.Stop(); err != nil {
			t.Errorf("stop JVM %d: %v", j.Pid, err)
		}
	})
	return j
}

// Start starts the application in a new JVM and waits until it prints its ready line. The JVM is killed if
// this process dies (Pdeathsig); call Stop to end it. ctx bounds only the start, not the JVM's life.
func Start(ctx context.Context, opts Options) (*JVM, error) {
	if opts.App.Jar == "" || opts.App.MainClass == "" {
		return nil, errors.New("jvmtest: Options.App is required (see BuildSampleApp)")
	}
	if opts.Java == "" {
		opts.Java = "java"
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = defaultReadyTimeout
	}
	work, err := os.MkdirTemp("", "jvmtest-")
	if err != nil {
		return nil, err
	}
	// The JVM may run as another user and, with PrivateNamespaces, uses this directory as its /tmp.
	mode := os.FileMode(0o755)
	if opts.PrivateNamespaces {
		// Like a real /tmp: world-writable and sticky. (os.FileMode spells sticky ModeSticky, not 0o1000.)
		mode = 0o777 | os.ModeSticky
	}
	if err := os.Chmod(work, mode); err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	jar := filepath.Join(work, filepath.Base(opts.App.Jar))
	if err := copyFile(opts.App.Jar, jar); err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	for name, data := range opts.Files {
		if name != filepath.Base(name) {
			os.RemoveAll(work)
			return nil, fmt.Errorf("jvmtest: Options.Files: %q is not a plain file name", name)
		}
		if err := os.WriteFile(filepath.Join(work, name), data, 0o644); err != nil {
			os.RemoveAll(work)
			return nil, err
		}
	}
	cp, cwd := jar, work
	if opts.PrivateNamespaces {
		cp, cwd = "/tmp/"+filepath.Base(jar), "/"
	}
	args := jvmOptions(opts)
	args = append(args, "-cp", cp, opts.App.MainClass)

	var cmd *exec.Cmd
	if opts.PrivateNamespaces {
		// The shell runs as pid 1 of the new PID namespace and execs java, so java keeps pid 1. Making the mount
		// tree private first keeps the /tmp bind mount from propagating back to the host.
		script := `set -e; mount --make-rprivate /; mount --bind "$0" /tmp; cd /tmp; exec "$@"`
		flags := uintptr(syscall.CLONE_NEWPID | syscall.CLONE_NEWNS)
		if opts.PrivateNetwork {
			script = "ip link set lo up; " + script
			flags |= syscall.CLONE_NEWNET
		}
		cmd = exec.Command("/bin/sh", append([]string{"-c", script, work, opts.Java}, args...)...)
		cmd.Dir = cwd
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
	} else {
		cmd = exec.Command(opts.Java, args...)
		cmd.Dir = cwd
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr.Setpgid = true
	cmd.Env = append(os.Environ(), opts.Env...)
	if opts.PrivateNetwork && !opts.PrivateNamespaces {
		os.RemoveAll(work)
		return nil, errors.New("jvmtest: PrivateNetwork requires PrivateNamespaces")
	}
	if opts.Credential != nil {
		if opts.PrivateNamespaces {
			// mount needs root; the JVM itself drops privileges through the launcher instead.
			os.RemoveAll(work)
			return nil, errors.New("jvmtest: Credential and PrivateNamespaces cannot be combined")
		}
		cmd.SysProcAttr.Credential = opts.Credential
	}

	out := &lockedBuffer{}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	cmd.Stderr = out
	// Pdeathsig fires when the OS thread that forked the child ends, not the process, and the Go runtime ends
	// threads that a goroutine locked and did not unlock (pkg/jvm does that on purpose). Forking from a thread
	// locked for the JVM's whole life keeps the signal for when this process really dies.
	started := make(chan error, 1)
	copied := make(chan struct{})
	j := &JVM{WorkDir: work, ClassPath: cp, cmd: cmd, private: opts.PrivateNamespaces, out: out,
		exited: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		// Wait must not run before stdout is drained, or the pipe is closed under the reader.
		<-copied
		j.waitErr = cmd.Wait()
		close(j.exited)
	}()
	if err := <-started; err != nil {
		os.RemoveAll(work)
		return nil, fmt.Errorf("jvmtest: start %s: %w", opts.Java, err)
	}
	j.Pid = cmd.Process.Pid

	ready := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			out.Write([]byte(line + "\n"))
			if !signalled && strings.Contains(line, SampleReadyLine) {
				signalled = true
				close(ready)
			}
		}
		io.Copy(out, stdout)
	}()

	timer := time.NewTimer(opts.ReadyTimeout)
	defer timer.Stop()
	select {
	case <-ready:
		return j, nil
	case <-j.exited:
		j.cleanupFiles()
		os.RemoveAll(work)
		return nil, fmt.Errorf("jvmtest: JVM exited before it was ready (%v): %s", j.waitErr, out.String())
	case <-timer.C:
	case <-ctx.Done():
	}
	_ = j.Stop()
	return nil, fmt.Errorf("jvmtest: JVM not ready in %s: %s", opts.ReadyTimeout, out.String())
}

// Alive reports whether the JVM process is still running.
func (j *JVM) Alive() bool {
	select {
	case <-j.exited:
		return false
	default:
		return syscall.Kill(j.Pid, 0) == nil
	}
}

// Exited is closed when the JVM process has ended.
func (j *JVM) Exited() <-chan struct{} { return j.exited }

// Output returns what the JVM has written to stdout and stderr so far.
func (j *JVM) Output() string { return j.out.String() }

// Stop ends the JVM: SIGTERM so that it removes its own hsperfdata and attach files, then SIGKILL after a grace
// period. It removes the working directory and is safe to call more than once.
func (j *JVM) Stop() error {
	var err error
	j.stop.Do(func() {
		select {
		case <-j.exited:
		default:
			// With PrivateNamespaces the JVM is pid 1 of its namespace: killing it ends the namespace.
			_ = syscall.Kill(j.Pid, syscall.SIGTERM)
			select {
			case <-j.exited:
			case <-time.After(stopGrace):
				_ = syscall.Kill(-j.Pid, syscall.SIGKILL)
				_ = syscall.Kill(j.Pid, syscall.SIGKILL)
				<-j.exited
			}
		}
		j.cleanupFiles()
		err = os.RemoveAll(j.WorkDir)
	})
	return err
}

// cleanupFiles removes what a killed JVM leaves in the host's /tmp (nothing is left with PrivateNamespaces,
// where its /tmp is the working directory).
func (j *JVM) cleanupFiles() {
	if j.private {
		return
	}
	pid := strconv.Itoa(j.Pid)
	_ = os.Remove(filepath.Join("/tmp", ".java_pid"+pid))
	_ = os.Remove(filepath.Join("/tmp", ".attach_pid"+pid))
	// The marker pkg/jvm leaves after loading an agent, and its per-JVM lock file.
	_ = os.Remove(filepath.Join("/tmp", ".handlerkit-jmx-agent-"+pid+".json"))
	matches, _ := filepath.Glob(filepath.Join("/tmp", "hsperfdata_*", pid))
	locks, _ := filepath.Glob(filepath.Join("/tmp", ".handlerkit-jmx-agent-"+pid+"-*.lock"))
	matches = append(matches, locks...)
	for _, m := range matches {
		_ = os.Remove(m)
	}
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}

// lockedBuffer collects the JVM's output from the stdout reader and the stderr copier at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it is safe for concurrent use.
func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// NewestJDK returns the java launcher and version (JAVA_VERSION of its release file) of the newest JDK under
// /usr/lib/jvm whose feature release is at least min, or "" when there is none.
func NewestJDK(min int) (java, version string) {
	releases, _ := filepath.Glob("/usr/lib/jvm/*/release")
	best := 0
	for _, rel := range releases {
		data, err := os.ReadFile(rel)
		if err != nil {
			continue
		}
		v := releaseVersion(data)
		feature, err := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
		bin := filepath.Join(filepath.Dir(rel), "bin", "java")
		if _, statErr := os.Stat(bin); err != nil || statErr != nil || feature < min || feature <= best {
			continue
		}
		java, version, best = bin, v, feature
	}
	return java, version
}

// releaseVersion returns JAVA_VERSION from the contents of a JDK's release file.
func releaseVersion(data []byte) string {
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "JAVA_VERSION="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}
