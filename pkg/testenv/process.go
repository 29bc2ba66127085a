package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/handlerkit/handlerkit/pkg/testenv/internal/spawn"
)

// Process is one program an Environment started: a control-plane component
// whose output goes to a log file, and which dies with the test binary.
type Process struct {
	// Name says which component this is, for example "etcd".
	Name string
	// LogPath is the file that receives the program's stdout and stderr.
	LogPath string

	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
}

// startProcess starts bin with args, its output in logDir/name.log. The child
// gets SIGKILL when the test binary dies (Pdeathsig, see package spawn), so it
// cannot outlive it, and runs in its own process group so that Stop
// reaches anything it spawned.
func startProcess(name, bin, logDir string, args []string, env []string) (*Process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("testenv: creating %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := spawn.Start(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("testenv: starting %s (%s): %w", name, bin, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the operating-system process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop asks the process group to end with SIGTERM and uses SIGKILL once grace
// has passed (at once for a grace of 0). It returns once the process has been
// reaped.
func (p *Process) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	pgid := p.cmd.Process.Pid
	if grace > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.done
		}
	} else {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Anything left in the group (a child that ignored SIGTERM) goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// tail returns the last n lines of the process log, for error messages.
func (p *Process) tail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.LogPath, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// failure wraps err with the tail of the process log so that a failed start
// explains itself.
func (p *Process) failure(err error) error {
	return fmt.Errorf("%w\n--- last lines of %s ---\n%s", err, p.LogPath, p.tail(30))
}

// waitExitOrCtx returns an error when the process exits before ctx ends.
func (p *Process) exitedEarly() error {
	if exited, err := p.Exited(); exited {
		if err == nil {
			err = errors.New("exited with status 0")
		}
		return p.failure(fmt.Errorf("testenv: %s exited during start: %w", p.Name, err))
	}
	return nil
}

// waitFor polls check until it returns nil, the process exits, or ctx ends.
func (p *Process) waitFor(ctx context.Context, what string, check func(context.Context) error) error {
	var last error
	for {
		if err := p.exitedEarly(); err != nil {
			return err
		}
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return p.failure(fmt.Errorf("testenv: %s not %s: %w (last check: %v)", p.Name, what, ctx.Err(), last))
		case <-time.After(50 * time.Millisecond):
		}
	}
}
