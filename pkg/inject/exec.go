package inject

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/handlerkit/handlerkit/pkg/jvm"
)

// The Exec strategy's two commands. They are constants: every value they
// use arrives as a positional parameter ("$0", "$@") or on stdin, never as
// part of the script, so nothing from a spec or a pod reaches a shell parser.
const (
	// stageScript writes stdin (jmx-attach) into a new private directory and
	// prints the file's path. The directory is the container user's alone;
	// the file is executable by all so that jmx-attach, run as root, can run
	// itself again (through /proc/self/exe, which no directory permission
	// stands in front of) as the uid of a JVM of another user.
	stageScript = `umask 077 && d=$(mktemp -d) && cat > "$d/jmx-attach" && chmod 0755 "$d/jmx-attach" && printf '%s\n' "$d/jmx-attach"`
	// runScript runs the staged jmx-attach ("$0") with its arguments ("$@"),
	// stdin passed on, then removes it and its directory.
	runScript = `"$0" "$@"; rc=$?; rm -f -- "$0"; rmdir -- "${0%/*}" 2>/dev/null; exit $rc`
)

// MaxExecOutput bounds what the Exec strategy reads of each of an exec's
// stdout and stderr: the first MaxExecOutput bytes are kept, and once more
// arrive the exec is stopped and the outcome is ReasonOutputTooLarge. The
// target's own /bin/sh runs both commands, so what they print is the
// target's to choose; jmx-attach prints one line of JSON per JVM.
const MaxExecOutput = 256 << 10

// ReasonOutputTooLarge is Outcome.Refused when an exec printed more than
// MaxExecOutput bytes on stdout or stderr (the target's /bin/sh prints
// without end, say): nothing more is read, and asking again would read the
// same.
const ReasonOutputTooLarge = "ExecOutputTooLarge"

// Exec is the Strategy that runs jmx-attach inside the JVM's own container
// through the pods/exec API. It needs the operator to be allowed to create
// pods/exec, and /bin/sh, mktemp, cat, chmod and a writable /tmp in the
// target image.
type Exec struct {
	// Config is the operator's client configuration; Client its clientset.
	Config *rest.Config
	Client kubernetes.Interface
	// AttachHelper and AgentJar are the operator's own copies of jmx-attach
	// and the agent jar (in its image), streamed into the target.
	AttachHelper, AgentJar string
}

// Name implements Strategy.
func (s *Exec) Name() string { return "Exec" }

// Inject implements Strategy.
func (s *Exec) Inject(ctx context.Context, t Target, r Request) (Outcome, error) {
	if _, err := AgentHost(t.Pod); err != nil {
		return Outcome{}, err
	}
	if _, err := EncodeConfig(r.Config); err != nil {
		return Outcome{Refused: ReasonConfigTooLarge, Detail: err.Error()}, nil
	}
	jar, err := os.ReadFile(s.AgentJar)
	if err != nil {
		return Outcome{}, fmt.Errorf("read the agent jar: %w", err)
	}
	stdin, err := bundle(jar, r.Config)
	if err != nil {
		return Outcome{}, err
	}
	return s.run(ctx, t, append([]string{"inject"}, append(injectArgs(t, r, false), "--bundle-stdin")...), stdin)
}

// Reconfigure implements Strategy.
func (s *Exec) Reconfigure(ctx context.Context, t Target, r Request) (Outcome, error) {
	stdin, err := bundle(nil, r.Config)
	if err != nil {
		return Outcome{}, err
	}
	return s.run(ctx, t, append([]string{"reconfigure"}, append(reconfigureArgs(t, r, false), "--bundle-stdin")...), stdin)
}

func (s *Exec) run(ctx context.Context, t Target, args []string, stdin []byte) (Outcome, error) {
	helper, err := os.Open(s.AttachHelper)
	if err != nil {
		return Outcome{}, fmt.Errorf("open jmx-attach: %w", err)
	}
	defer helper.Close()
	ectx, stop := context.WithCancel(ctx)
	defer stop()
	stdout, stderr := &limitedBuffer{limit: MaxExecOutput, stop: stop}, &limitedBuffer{limit: MaxExecOutput, stop: stop}
	err = s.exec(ectx, t, []string{"/bin/sh", "-c", stageScript}, helper, stdout, stderr)
	if over := tooMuchOutput(t, stdout, stderr); over != nil {
		return *over, nil
	}
	if err != nil {
		if refusedPatch(err) {
			return Outcome{Refused: ReasonPatchRefused, Detail: truncate(fmt.Sprintf(
				"the API server refused the exec into %s: %v", t, err), 1024)}, nil
		}
		if noShell(err, stderr.String()) {
			return Outcome{Refused: ReasonShellNotFound, Detail: fmt.Sprintf(
				"the Exec strategy needs /bin/sh, mktemp, cat and chmod in container %s (%v); use the EphemeralContainer strategy, which needs nothing in the image",
				t.Container, oneLine(firstNonEmpty(stderr.String(), err.Error()), 200))}, nil
		}
		return Outcome{}, fmt.Errorf("copy jmx-attach into %s: %w: %s", t, err, oneLine(stderr.String(), 300))
	}
	staged := strings.TrimSpace(stdout.String())
	if !path.IsAbs(staged) || path.Clean(staged) != staged || strings.ContainsAny(staged, "\n\x00") || path.Base(staged) != "jmx-attach" {
		return Outcome{}, fmt.Errorf("copy jmx-attach into %s: unexpected path %q", t, oneLine(staged, 100))
	}
	stdout, stderr = &limitedBuffer{limit: MaxExecOutput, stop: stop}, &limitedBuffer{limit: MaxExecOutput, stop: stop}
	cmd := append([]string{"/bin/sh", "-c", runScript, staged}, args...)
	// Once the bundle is sent, jmx-attach waits (up to Request.Wait for a
	// JVM to appear) with the exec open: that wait holds no slot of the
	// operator's pool.
	in := &idleAtEOF{ctx: ctx, r: bytes.NewReader(stdin)}
	err = s.exec(ectx, t, cmd, in, stdout, stderr)
	in.done()
	if rerr := Resume(ctx); rerr != nil && err == nil {
		return Outcome{}, rerr
	}
	if over := tooMuchOutput(t, stdout, stderr); over != nil {
		return *over, nil
	}
	code := 0
	if err != nil {
		var exitErr utilexec.ExitError
		if !errors.As(err, &exitErr) {
			return Outcome{}, fmt.Errorf("exec jmx-attach in %s: %w: %s", t, err, oneLine(stderr.String(), 300))
		}
		code = exitErr.ExitStatus()
	}
	out := stdout.Bytes()
	if code != 0 && len(bytes.TrimSpace(out)) == 0 {
		out = stderr.Bytes()
	}
	o, err := parseOutcome(out, code)
	return untrusted(o), err
}

// limitedBuffer keeps the first limit bytes written to it and counts the
// rest; the first write past limit calls stop (which ends the exec). It is
// written by the exec's stream copier and read once the exec returned.
type limitedBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int
	total int64
	stop  func()
}

// Write keeps what fits and never fails, so that the stream is drained
// until the exec ends.
func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += int64(len(p))
	if room := b.limit - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	if b.total > int64(b.limit) && b.stop != nil {
		b.stop()
		b.stop = nil
	}
	return len(p), nil
}

// over says whether more than limit bytes were written, and how many.
func (b *limitedBuffer) over() (bool, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total > int64(b.limit), b.total
}

// Bytes are the bytes kept.
func (b *limitedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Bytes()
}

func (b *limitedBuffer) String() string { return string(b.Bytes()) }

// tooMuchOutput is the outcome ReasonOutputTooLarge when either stream went
// past its bound, nil otherwise.
func tooMuchOutput(t Target, stdout, stderr *limitedBuffer) *Outcome {
	for _, s := range []struct {
		name string
		b    *limitedBuffer
	}{{"stdout", stdout}, {"stderr", stderr}} {
		if over, n := s.b.over(); over {
			return &Outcome{Refused: ReasonOutputTooLarge, Detail: fmt.Sprintf(
				"the exec into container %s printed more than %d bytes on %s (%d read before it was stopped; it begins %q): "+
					"the Exec strategy reads at most %d bytes of each stream; the container's /bin/sh or its environment prints without end; "+
					"use the EphemeralContainer strategy, which runs nothing of the image",
				t.Container, MaxExecOutput, s.name, n, oneLine(s.b.String(), 80), MaxExecOutput)}
		}
	}
	return nil
}

// oneLine is s, which the target printed, made fit for a message: one line
// of printable characters (each control character, newline included, and
// each invalid byte becomes a space or U+FFFD), at most n bytes.
func oneLine(s string, n int) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if b.Len() >= n {
			return strings.TrimSpace(b.String()) + "…"
		}
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			b.WriteByte(' ')
		case !unicode.IsPrint(r):
			b.WriteRune('\uFFFD')
		default:
			b.WriteRune(r)
		}
	}
	return strings.TrimSpace(b.String())
}

// reasonWord says whether s may be a jmx-attach reason: lower-case words
// joined by hyphens, at most 64 bytes ("" is no reason).
func reasonWord(s string) bool {
	if len(s) > 64 {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// untrusted is o with every text the target printed made one printable
// line of bounded length: jmx-attach ran in the target's container, where
// anything may stand in for it.
func untrusted(o Outcome) Outcome {
	o.Detail = oneLine(o.Detail, 512)
	for i := range o.Results {
		r := &o.Results[i]
		r.MainClass, r.Message, r.Note = oneLine(r.MainClass, 256), oneLine(r.Message, 1024), oneLine(r.Note, 512)
		r.Host, r.AgentPath, r.ConfigPath, r.JavaVersion = oneLine(r.Host, 256), oneLine(r.AgentPath, 256), oneLine(r.ConfigPath, 256), oneLine(r.JavaVersion, 64)
		if !reasonWord(string(r.Reason)) {
			// It becomes an Event's reason: only jmx-attach's own words.
			r.Message = oneLine("jmx-attach reported an unknown reason "+strconv.Quote(oneLine(string(r.Reason), 64))+": "+r.Message, 1024)
			r.Reason = jvm.ReasonInternal
		}
	}
	return o
}

// idleAtEOF reads r and gives back the pool slot of ctx's job (Idle) when r
// is all read, unless done was called first.
type idleAtEOF struct {
	ctx  context.Context
	r    io.Reader
	mu   sync.Mutex
	over bool
}

func (i *idleAtEOF) Read(p []byte) (int, error) {
	n, err := i.r.Read(p)
	if err == io.EOF {
		i.mu.Lock()
		if !i.over {
			i.over = true
			Idle(i.ctx)
		}
		i.mu.Unlock()
	}
	return n, err
}

// done says the exec has returned: a late EOF no longer gives the slot back.
func (i *idleAtEOF) done() {
	i.mu.Lock()
	i.over = true
	i.mu.Unlock()
}

// noShell says whether an exec failed because the container has no /bin/sh
// or one of the tools the stage script runs: the runtime's "executable file
// not found", or the shell's exit 127 (command not found).
func noShell(err error, stderr string) bool {
	msg := err.Error() + " " + stderr
	if strings.Contains(msg, "executable file not found") || strings.Contains(msg, "no such file or directory") && strings.Contains(msg, "/bin/sh") {
		return true
	}
	var exitErr utilexec.ExitError
	return errors.As(err, &exitErr) && exitErr.ExitStatus() == 127
}

func firstNonEmpty(a, b string) string {
	if strings.TrimSpace(a) != "" {
		return strings.TrimSpace(a)
	}
	return b
}

// exec runs command in the target container with stdin. It uses the SPDY
// protocol, a POST, which RBAC authorizes as `create` on pods/exec: the
// WebSocket protocol is a GET, which API servers before the
// AuthorizePodWebsocketUpgradeCreatePermission gate authorize as `get`, and
// the operator is granted `create` only.
func (s *Exec) exec(ctx context.Context, t Target, command []string, stdin io.Reader, stdout, stderr io.Writer) error {
	req := s.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.Pod.Namespace).Name(t.Pod.Name).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: t.Container, Command: command, Stdin: true, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(s.Config, http.MethodPost, req.URL())
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// bundle is the stdin of `jmx-attach --bundle-stdin`: the agent jar (nil for
// reconfigure) and the config, as jvm.WriteBundle writes them.
func bundle(jar, config []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := jvm.WriteBundle(&buf, jar, config); err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	return buf.Bytes(), nil
}
