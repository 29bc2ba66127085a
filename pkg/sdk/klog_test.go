package sdk_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// lockedBuffer is a log output that tests can read while goroutines write.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the JSON lines written so far.
func (b *lockedBuffer) lines(t testing.TB) []map[string]any {
	t.Helper()
	b.mu.Lock()
	text := b.buf.String()
	b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		if l == "" {
			continue
		}
		m := map[string]any{}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// lineWith waits for a JSON line whose msg or any value contains s.
func (b *lockedBuffer) lineWith(t testing.TB, s string) map[string]any {
	t.Helper()
	var found map[string]any
	eventually(t, 10*time.Second, "a log line with "+s, func() bool {
		for _, l := range b.lines(t) {
			for _, v := range l {
				if str, ok := v.(string); ok && strings.Contains(str, s) {
					found = l
					return true
				}
			}
		}
		return false
	})
	return found
}

func (b *lockedBuffer) contains(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Contains(b.buf.String(), s)
}

// jsonLogger is a debug-level logger writing JSON lines to a buffer.
func jsonLogger() (*logrus.Logger, *lockedBuffer) {
	buf := &lockedBuffer{}
	l := logrus.New()
	l.SetOutput(buf)
	l.SetFormatter(&logrus.JSONFormatter{})
	l.SetLevel(logrus.DebugLevel)
	return l, buf
}

func TestKlogLinesArriveInTheOperatorsLoggerAsJSON(t *testing.T) {
	log, buf := jsonLogger()
	if _, err := sdk.New(sdk.SharedEnv(t).Config(), sdk.WithRegisterer(newRegistry()), sdk.WithMetricsAddr("0"), sdk.WithLogger(log)); err != nil {
		t.Fatal(err)
	}

	klog.InfoS("klog structured info", "key", "value", "n", 3)
	klog.ErrorS(errors.New("boom"), "klog structured error", "object", klog.KRef("ns", "name"))
	klog.Infof("klog legacy %s", "printf")
	klog.Background().WithName("client").V(2).Info("klog verbose", "detail", true)
	klog.Background().V(5).Info("klog trace, below debug")
	// A real library path: apimachinery reports unhandled errors through klog.
	utilruntime.HandleError(errors.New("unhandled by client-go"))

	cases := []struct {
		find   string
		level  string
		fields map[string]any
	}{
		{"klog structured info", "info", map[string]any{"key": "value", "n": float64(3)}},
		{"klog structured error", "error", map[string]any{"error": "boom", "object": "ns/name"}},
		{"klog legacy printf", "info", nil},
		{"klog verbose", "debug", map[string]any{"detail": true, "logger": "client"}},
		{"unhandled by client-go", "error", nil},
	}
	for _, c := range cases {
		line := buf.lineWith(t, c.find)
		if line["level"] != c.level {
			t.Errorf("%q logged at %v, want %s: %v", c.find, line["level"], c.level, line)
		}
		for k, want := range c.fields {
			if line[k] != want {
				t.Errorf("%q: field %s = %#v, want %#v (line %v)", c.find, k, line[k], want, line)
			}
		}
	}
	if buf.contains("klog trace, below debug") {
		t.Error("a klog V(5) line was logged by a debug-level logger; it maps to trace")
	}
}

func TestLastOperatorWithKlogRoutingWins(t *testing.T) {
	env := sdk.SharedEnv(t)
	newOp := func(opts ...sdk.Option) *lockedBuffer {
		log, buf := jsonLogger()
		base := []sdk.Option{sdk.WithRegisterer(newRegistry()), sdk.WithMetricsAddr("0"), sdk.WithLogger(log)}
		if _, err := sdk.New(env.Config(), append(base, opts...)...); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	first := newOp()
	unrouted := newOp(sdk.WithoutKlogRouting())
	klog.InfoS("to the first")
	first.lineWith(t, "to the first")
	if unrouted.contains("to the first") {
		t.Error("an Operator made WithoutKlogRouting received klog's lines")
	}
	last := newOp()
	klog.InfoS("to the last")
	last.lineWith(t, "to the last")
	if first.contains("to the last") {
		t.Error("klog still writes to the first Operator's logger after a later one was created")
	}
}
