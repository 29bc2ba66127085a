package session

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/handlerkit/handlerkit/bench/internal/contender"
	"github.com/handlerkit/handlerkit/bench/internal/probe"
)

// RunChildIfRequested runs the process as a child when EnvSpec is set, and
// exits with the child's status; otherwise it returns at once. Call it first
// thing in main and in TestMain.
func RunChildIfRequested() {
	raw, ok := os.LookupEnv(EnvSpec)
	if !ok {
		return
	}
	if err := runChild(raw, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runChild runs the contender raw describes until in closes, writing
// Messages to out.
func runChild(raw string, in io.Reader, out io.Writer) error {
	var spec Spec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return fmt.Errorf("decode spec: %w", err)
	}
	klog.SetOutput(io.Discard) // client-go's chatter; errors reach us as errors
	klog.LogToStderr(false)
	// pkg/sdk, linked into this binary, installs a klog logger that writes
	// to stderr until an Operator routes klog: discard at the source.
	klog.SetLogger(logr.Discard())
	cfg, err := clientcmd.BuildConfigFromFlags("", spec.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = spec.QPS, spec.Burst
	requests := probe.NewRequests()
	requests.Install(cfg)

	w := &writer{enc: json.NewEncoder(out)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var rec *probe.Recorder
	rec = probe.NewRecorder(spec.Objects,
		func(at time.Time) { w.send(Message{Type: MsgFirst, At: at.UnixNano()}) },
		func(gen int64, at time.Time) {
			w.send(Message{Type: MsgReached, At: at.UnixNano(), Gen: gen})
			if gen == 1 && spec.Memory {
				go w.sendMemory(ctx)
			}
		})
	go serveCommands(in, cancel, func(name string) {
		w.send(Message{Type: MsgMark, At: time.Now().UnixNano(), Name: name, Calls: rec.Calls(), Failures: rec.Failures(), Requests: requests.Snapshot()})
	})

	w.send(Message{Type: MsgStarted, At: time.Now().UnixNano()})
	runErr := contender.Run(ctx, cfg, spec.Spec, rec)
	final := Message{Type: MsgFinal, At: time.Now().UnixNano(), Calls: rec.Calls(), Failures: rec.Failures(), Requests: requests.Snapshot()}
	for _, d := range rec.Samples() {
		final.LatencyNs = append(final.LatencyNs, d.Nanoseconds())
	}
	if runErr != nil {
		final.Error = runErr.Error()
	}
	w.send(final)
	return runErr
}

// serveCommands reads commands until in closes, then cancels the child.
func serveCommands(in io.Reader, cancel context.CancelFunc, mark func(name string)) {
	defer cancel()
	s := bufio.NewScanner(in)
	for s.Scan() {
		if name, ok := strings.CutPrefix(s.Text(), "mark "); ok {
			mark(name)
		}
	}
}

// writer serializes Messages onto the child's stdout.
type writer struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (w *writer) send(m Message) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.enc.Encode(m) // a parent that stopped reading is gone; nothing to tell
}

// sendMemory lets the last handlings return, then reports the memory.
func (w *writer) sendMemory(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(500 * time.Millisecond):
	}
	m, err := probe.ReadMemory()
	msg := Message{Type: MsgMemory, At: time.Now().UnixNano(), Memory: &m}
	if err != nil {
		msg.Error = err.Error()
	}
	w.send(msg)
}
