package sdk

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"
)

// WithoutKlogRouting leaves klog, the logger of client-go and the rest of
// the Kubernetes libraries, as it is. By default New routes klog into the
// Operator's logger (see routeKlog), so that the process writes one log
// format.
func WithoutKlogRouting() Option { return func(c *config) { c.noKlogRouting = true } }

var (
	// klogDestination is the logger klog writes to: the last Operator's
	// that New created with klog routing.
	klogDestination atomic.Pointer[logrus.FieldLogger]
	// klogInstalled installs the sink once per process. klog's SetLogger
	// is not safe while other goroutines log, so later Operators only
	// swap klogDestination.
	klogInstalled sync.Once
)

// routeKlog makes klog write through log: klog's own functions (klog.InfoS,
// klog.ErrorS, klog.Infof, ...) and the contextual loggers that client-go
// takes from klog.FromContext and klog.Background. klog is process-wide,
// so the last Operator created with routing wins.
//
// Levels: errors are logged at error level; klog's verbosity 0 at info,
// 1 to 4 at debug, 5 and more at trace (klog's warnings arrive as info).
// The logrus level decides what contextual loggers write. klog's -v flag
// still gates calls of klog.V(n) made through klog's global functions.
func routeKlog(log logrus.FieldLogger) {
	klogDestination.Store(&log)
	klogInstalled.Do(func() {
		klog.SetLoggerWithOptions(logr.New(&klogSink{}), klog.ContextualLogger(true))
	})
}

// klogSink is a logr.LogSink that writes to klogDestination.
type klogSink struct {
	name   string
	fields logrus.Fields
}

var _ logr.LogSink = (*klogSink)(nil)

// klogLevel maps a klog verbosity to a logrus level.
func klogLevel(v int) logrus.Level {
	switch {
	case v <= 0:
		return logrus.InfoLevel
	case v < 5:
		return logrus.DebugLevel
	}
	return logrus.TraceLevel
}

func (s *klogSink) destination() logrus.FieldLogger {
	if l := klogDestination.Load(); l != nil {
		return *l
	}
	return logrus.StandardLogger()
}

// Init implements logr.LogSink.
func (s *klogSink) Init(logr.RuntimeInfo) {}

// Enabled reports whether the destination logs at the level of verbosity v.
func (s *klogSink) Enabled(v int) bool {
	switch l := s.destination().(type) {
	case *logrus.Logger:
		return l.IsLevelEnabled(klogLevel(v))
	case *logrus.Entry:
		return l.Logger.IsLevelEnabled(klogLevel(v))
	}
	return true
}

// Info logs msg at the level of verbosity v.
func (s *klogSink) Info(v int, msg string, keysAndValues ...any) {
	s.entry(keysAndValues).Log(klogLevel(v), msg)
}

// Error logs msg at error level.
func (s *klogSink) Error(err error, msg string, keysAndValues ...any) {
	e := s.entry(keysAndValues)
	if err != nil {
		e = e.WithError(err)
	}
	e.Error(msg)
}

// WithValues returns a sink that adds keysAndValues to every line.
func (s *klogSink) WithValues(keysAndValues ...any) logr.LogSink {
	return &klogSink{name: s.name, fields: addFields(s.fields, keysAndValues)}
}

// WithName returns a sink whose lines carry the field logger=name, joined
// with "/" to the names before it.
func (s *klogSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	return &klogSink{name: name, fields: s.fields}
}

func (s *klogSink) entry(keysAndValues []any) *logrus.Entry {
	fields := addFields(s.fields, keysAndValues)
	if s.name != "" {
		if fields == nil {
			fields = logrus.Fields{}
		}
		fields["logger"] = s.name
	}
	return s.destination().WithFields(fields)
}

// addFields returns base with keysAndValues added, in a new map.
func addFields(base logrus.Fields, keysAndValues []any) logrus.Fields {
	if len(base) == 0 && len(keysAndValues) == 0 {
		return nil
	}
	out := make(logrus.Fields, len(base)+len(keysAndValues)/2)
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i < len(keysAndValues); i += 2 {
		key, ok := keysAndValues[i].(string)
		if !ok {
			key = fmt.Sprint(keysAndValues[i])
		}
		var v any = "(MISSING)"
		if i+1 < len(keysAndValues) {
			v = fieldValue(keysAndValues[i+1])
		}
		out[key] = v
	}
	return out
}

// fieldValue makes v safe for logrus's formatters: the JSON formatter
// drops a whole line when one value cannot be marshalled.
func fieldValue(v any) any {
	switch v := v.(type) {
	case nil, string, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64, error:
		return v
	case fmt.Stringer:
		return stringOf(v)
	}
	if _, err := json.Marshal(v); err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return v
}

// stringOf calls String, which may panic on a nil receiver.
func stringOf(s fmt.Stringer) (out string) {
	defer func() {
		if recover() != nil {
			out = fmt.Sprintf("%+v", s)
		}
	}()
	return s.String()
}
