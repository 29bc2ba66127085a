package session

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Child is a running contender process.
type Child struct {
	spec    Spec
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	msgs    chan Message
	stderr  *tail
	exited  chan struct{}
	waitErr error

	mu   sync.Mutex
	seen []Message
}

// Start runs spec in a new process: this executable again, with EnvSpec
// set. The child dies with the parent (Pdeathsig, and its stdin closing).
func Start(spec Spec) (*Child, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("session: find own executable: %w", err)
	}
	c := &Child{spec: spec, msgs: make(chan Message, 64), stderr: &tail{max: 16 << 10}, exited: make(chan struct{})}
	c.cmd = exec.Command(exe)
	c.cmd.Env = append(os.Environ(), EnvSpec+"="+string(raw))
	if _, set := os.LookupEnv("GORACE"); !set {
		// A race-enabled child (the smoke test's) would otherwise sleep a
		// second at exit.
		c.cmd.Env = append(c.cmd.Env, "GORACE=atexit_sleep_ms=0")
	}
	c.cmd.Stderr = c.stderr
	if os.Getenv(EnvVerbose) != "" {
		c.cmd.Stderr = io.MultiWriter(c.stderr, os.Stderr)
	}
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("session: start child: %w", err)
	}
	go c.read(stdout)
	return c, nil
}

// read decodes the child's messages until its stdout closes, then reaps it.
func (c *Child) read(stdout io.Reader) {
	s := bufio.NewScanner(stdout)
	s.Buffer(make([]byte, 64<<10), 64<<20) // the final message carries every latency sample
	for s.Scan() {
		var m Message
		if err := json.Unmarshal(s.Bytes(), &m); err == nil {
			c.msgs <- m
		}
	}
	close(c.msgs)
	c.waitErr = c.cmd.Wait()
	close(c.exited)
}

// Await returns the first message (already received or still to come) that
// match accepts, waiting at most timeout.
func (c *Child) Await(ctx context.Context, timeout time.Duration, what string, match func(Message) bool) (Message, error) {
	c.mu.Lock()
	for _, m := range c.seen {
		if match(m) {
			c.mu.Unlock()
			return m, nil
		}
	}
	c.mu.Unlock()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return Message{}, ctx.Err()
		case <-timer.C:
			return Message{}, fmt.Errorf("session: %s: no %s within %s; child stderr:\n%s", c.spec.Contender, what, timeout, c.stderr)
		case m, ok := <-c.msgs:
			if !ok {
				<-c.exited
				return Message{}, fmt.Errorf("session: %s exited (%v) before %s; child stderr:\n%s", c.spec.Contender, c.waitErr, what, c.stderr)
			}
			c.mu.Lock()
			c.seen = append(c.seen, m)
			c.mu.Unlock()
			if m.Type == MsgFinal && m.Error != "" && !match(m) {
				return Message{}, fmt.Errorf("session: %s failed before %s: %s", c.spec.Contender, what, m.Error)
			}
			if match(m) {
				return m, nil
			}
		}
	}
}

// AwaitType waits for the first message of type typ.
func (c *Child) AwaitType(ctx context.Context, timeout time.Duration, typ string) (Message, error) {
	return c.Await(ctx, timeout, typ, func(m Message) bool { return m.Type == typ })
}

// AwaitReached waits until every object has been handled at generation gen.
func (c *Child) AwaitReached(ctx context.Context, timeout time.Duration, gen int64) (Message, error) {
	return c.Await(ctx, timeout, fmt.Sprintf("all objects handled at generation %d", gen),
		func(m Message) bool { return m.Type == MsgReached && m.Gen == gen })
}

// Mark asks the child for its counters now.
func (c *Child) Mark(ctx context.Context, name string) (Message, error) {
	if _, err := fmt.Fprintf(c.stdin, "mark %s\n", name); err != nil {
		return Message{}, fmt.Errorf("session: mark %s: %w", name, err)
	}
	return c.Await(ctx, 30*time.Second, "mark "+name, func(m Message) bool { return m.Type == MsgMark && m.Name == name })
}

// Stop closes the child's stdin, waits for its final message and its exit,
// and kills it if it takes longer than timeout. An error the contender
// returned while stopping is in the final message's Error, not in err:
// what it measured before is still valid.
func (c *Child) Stop(ctx context.Context, timeout time.Duration) (Message, error) {
	_ = c.stdin.Close()
	final, err := c.Await(ctx, timeout, MsgFinal, func(m Message) bool { return m.Type == MsgFinal })
	select {
	case <-c.exited:
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.exited
		err = errors.Join(err, fmt.Errorf("session: %s did not exit within %s; killed", c.spec.Contender, timeout))
	}
	return final, err
}

// Kill ends the child at once; for error paths.
func (c *Child) Kill() {
	_ = c.stdin.Close()
	_ = c.cmd.Process.Kill()
	go func() {
		for range c.msgs { // unblock the reader so that it can reap the child
		}
	}()
	<-c.exited
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
