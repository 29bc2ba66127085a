package sdk

import (
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// WithoutKlogRouting keeps New from routing klog into this Operator's
// logger. klog keeps writing where it wrote before: to the logger of the
// last Operator created with routing or, when there is none, to stderr in
// klog's text format. Use it for a second Operator in a process whose klog
// lines belong to the first, or in a program that sets its own klog logger.
//
// It does not leave klog untouched: importing the package installs its
// klog sink, whatever options New is given (see "Process-wide state" in
// the package documentation).
func WithoutKlogRouting() Option { return func(c *config) { c.noKlogRouting = true } }

// klog, the logger of client-go and the rest of the Kubernetes libraries,
// is process-wide, and klog.SetLogger is not safe while other goroutines
// log: every klog call and every klog.Background or klog.FromContext reads
// the logger it sets without synchronisation. So the package sets it once,
// in init, before any goroutine of the program runs, to a sink whose
// destination New swaps atomically (klogDestination): the logger of the
// last Operator created with routing, or, while there is none, klog's text
// format on stderr (k8s.io/klog/v2/textlogger) gated by klog's -v and
// -vmodule. The package documentation says what this costs.
func init() {
	klog.SetLoggerWithOptions(logr.New(newKlogSink()), klog.ContextualLogger(true))
}

// klogDestination is the logger klog writes to: the last Operator's that
// New created with klog routing; nil until then.
var klogDestination atomic.Pointer[logrus.FieldLogger]

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
	// Reading klog's logger is safe: klog allows setting it only before
	// goroutines start.
	if _, ours := klog.Background().GetSink().(*klogSink); !ours {
		log.Warn("klog's logger was replaced after package sdk's init (klog.SetLogger or ClearLogger); klog's lines do not reach the Operator's logger (pass WithoutKlogRouting to silence this warning)")
	}
}

// klogSink is the logr.LogSink that this package installs as klog's
// logger. It writes to klogDestination when set, and else in klog's text
// format to stderr.
type klogSink struct {
	name   string
	fields logrus.Fields
	// depth is the number of call frames between the sink's methods and
	// the logging call: logr's, plus those klog adds with WithCallDepth.
	depth int
	// text is the same logger (names, values, call depth) in klog's text
	// format, for lines no Operator receives.
	text logr.LogSink
}

var (
	_ logr.LogSink          = (*klogSink)(nil)
	_ logr.CallDepthLogSink = (*klogSink)(nil)
)

func newKlogSink() *klogSink {
	return &klogSink{text: textlogger.NewLogger(textlogger.NewConfig()).GetSink()}
}

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

// klogTarget returns klogDestination's logger, nil when no Operator routes klog.
func klogTarget() logrus.FieldLogger {
	if l := klogDestination.Load(); l != nil {
		return *l
	}
	return nil
}

// Init implements logr.LogSink.
func (s *klogSink) Init(info logr.RuntimeInfo) {
	s.depth = info.CallDepth
	// The text sink is called from this sink's methods: one frame more.
	s.text.Init(logr.RuntimeInfo{CallDepth: info.CallDepth + 1})
}

// WithCallDepth implements logr.CallDepthLogSink: klog's functions use it
// so that the text format names their caller's file and line.
func (s *klogSink) WithCallDepth(depth int) logr.LogSink {
	out := *s
	out.depth += depth
	if cd, ok := s.text.(logr.CallDepthLogSink); ok {
		out.text = cd.WithCallDepth(depth)
	}
	return &out
}

// Enabled reports whether a line of verbosity v is written: by the
// destination's logrus level, or without one by klog's -v and -vmodule.
func (s *klogSink) Enabled(v int) bool {
	switch l := klogTarget().(type) {
	case nil:
		// VDepth's 0 is this method; +1 for logr's Logger method.
		return klog.VDepth(s.depth+1, klog.Level(v)).Enabled()
	case *logrus.Logger:
		return l.IsLevelEnabled(klogLevel(v))
	case *logrus.Entry:
		return l.Logger.IsLevelEnabled(klogLevel(v))
	}
	return true
}

// Info logs msg at the level of verbosity v.
func (s *klogSink) Info(v int, msg string, keysAndValues ...any) {
	dst := klogTarget()
	if dst == nil {
		s.text.Info(v, msg, keysAndValues...)
		return
	}
	s.entry(dst, keysAndValues).Log(klogLevel(v), msg)
}

// Error logs msg at error level.
func (s *klogSink) Error(err error, msg string, keysAndValues ...any) {
	dst := klogTarget()
	if dst == nil {
		s.text.Error(err, msg, keysAndValues...)
		return
	}
	e := s.entry(dst, keysAndValues)
	if err != nil {
		e = e.WithError(err)
	}
	e.Error(msg)
}

// WithValues returns a sink that adds keysAndValues to every line.
func (s *klogSink) WithValues(keysAndValues ...any) logr.LogSink {
	out := *s
	out.fields = addFields(s.fields, keysAndValues)
	out.text = s.text.WithValues(keysAndValues...)
	return &out
}

// WithName returns a sink whose lines carry the field logger=name, joined
// with "/" to the names before it (the text format joins them with ".", as
// klog does).
func (s *klogSink) WithName(name string) logr.LogSink {
	out := *s
	if s.name != "" {
		out.name = s.name + "/" + name
	} else {
		out.name = name
	}
	out.text = s.text.WithName(name)
	return &out
}

func (s *klogSink) entry(dst logrus.FieldLogger, keysAndValues []any) *logrus.Entry {
	fields := addFields(s.fields, keysAndValues)
	if s.name != "" {
		if fields == nil {
			fields = logrus.Fields{}
		}
		fields["logger"] = s.name
	}
	return dst.WithFields(fields)
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
