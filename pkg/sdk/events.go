package sdk

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kwatch "k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// Event recording limits, set explicitly on client-go's event correlator
// (k8s.io/client-go/tools/record). They are client-go's own defaults,
// which kubelet and the controller manager use too.
const (
	// DefaultEventBurst is how many Events the Operator may record about
	// one object before the rate limit applies. Further Events about it
	// are dropped until the allowance refills at DefaultEventQPS.
	DefaultEventBurst = 25
	// DefaultEventQPS refills that allowance: one Event per object every
	// five minutes.
	DefaultEventQPS = 1.0 / 300
	// DefaultEventAggregateMax is how many similar Events (same object,
	// type and reason, different messages) may be recorded within
	// DefaultEventAggregateInterval before they are combined into one
	// Event whose message says "(combined from similar events)".
	DefaultEventAggregateMax = 10
	// DefaultEventAggregateInterval is that window.
	DefaultEventAggregateInterval = 10 * time.Minute
	// DefaultEventFlushTimeout bounds how long Run, when it returns,
	// spends writing Events that handlers recorded but that were not
	// written yet.
	DefaultEventFlushTimeout = 5 * time.Second
)

// Retries of an Event whose write failed for lack of an answer (the API
// server unreachable), as client-go's recorder does. An Event the server
// refuses is not retried. Recording never blocks a handler: client-go's
// broadcaster queues up to 1,000 Events and drops more, with an error in
// the log.
const (
	eventMaxTries   = 12
	eventRetryDelay = 10 * time.Second
)

// WithEventSource sets the component that Events recorded by the Operator
// name as their source and reporting controller (what `kubectl describe`
// shows under From). The default is the process name, for example
// "my-operator" for /usr/bin/my-operator. The reporting instance is the
// pod's name, from $POD_NAME (set it from the downward API), else the
// host name.
func WithEventSource(component string) Option {
	return func(c *config) { c.eventSource = component }
}

// defaultEventSource is the process name, or "handlerkit" when it has none.
func defaultEventSource() string {
	if len(os.Args) > 0 {
		if name := filepath.Base(os.Args[0]); name != "." && name != string(filepath.Separator) && name != "" {
			return name
		}
	}
	return "handlerkit"
}

// eventInstance names this replica in the Events it records.
func eventInstance() string {
	if pod := os.Getenv("POD_NAME"); pod != "" {
		return pod
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		return host
	}
	return "unknown"
}

// EventRecorder returns the Operator's recorder of Kubernetes Events
// (core/v1, what `kubectl describe` shows). Events are written in the
// background while Run runs, rate-limited and aggregated as the
// DefaultEvent constants say; recording never blocks. An Event recorded
// while Run is not running is not written: it is logged instead. The
// recorder is the same value for the Operator's whole life and safe for
// concurrent use.
func (o *Operator) EventRecorder() record.EventRecorder { return o.events }

// EventRecorderFrom returns the event recorder of the Operator whose
// handler runs with ctx. Outside a handling it returns a recorder that
// logs each Event through LoggerFrom(ctx) and writes nothing. It never
// returns nil.
func EventRecorderFrom(ctx context.Context) record.EventRecorder {
	if o := OperatorFrom(ctx); o != nil {
		return o.EventRecorder()
	}
	return &logRecorder{log: LoggerFrom(ctx), why: "no Operator handles this context"}
}

// eventRecorder is the Operator's record.EventRecorder. It forwards to the
// recorder of the running term's broadcaster, and logs while none runs.
type eventRecorder struct {
	scheme *runtime.Scheme
	source corev1.EventSource
	client typedcorev1.EventsGetter
	log    logrus.FieldLogger

	mu      sync.RWMutex
	current record.EventRecorder
}

var _ record.EventRecorder = (*eventRecorder)(nil)

func newEventRecorder(scheme *runtime.Scheme, component string, client typedcorev1.EventsGetter, log logrus.FieldLogger) *eventRecorder {
	return &eventRecorder{
		scheme: scheme,
		source: corev1.EventSource{Component: component, Host: eventInstance()},
		client: client,
		log:    log.WithField("component", "events"),
	}
}

// Event records an Event about object. eventtype is corev1.EventTypeNormal
// or corev1.EventTypeWarning; reason is short and UpperCamelCase.
func (r *eventRecorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.AnnotatedEventf(object, nil, eventtype, reason, "%s", message)
}

// Eventf is Event with a formatted message.
func (r *eventRecorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.AnnotatedEventf(object, nil, eventtype, reason, messageFmt, args...)
}

// AnnotatedEventf is Eventf with annotations on the Event.
func (r *eventRecorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	// The read lock keeps stop from shutting the broadcaster down under a
	// recording; recording only queues, so it is held briefly.
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.current == nil {
		(&logRecorder{log: r.log, why: "the Operator is not running"}).AnnotatedEventf(object, annotations, eventtype, reason, messageFmt, args...)
		return
	}
	r.current.AnnotatedEventf(object, annotations, eventtype, reason, messageFmt, args...)
}

// broadcastWatcher is the watch.Broadcaster that client-go's event
// broadcaster embeds: watching it directly lets Run wait for the writer.
type broadcastWatcher interface {
	Watch() (kwatch.Interface, error)
}

// start begins a term of recording: a broadcaster, and a goroutine that
// writes its Events. The returned stop ends recording, writes what is
// still queued for up to DefaultEventFlushTimeout, and returns when the
// goroutines have ended.
func (r *eventRecorder) start() (stop func()) {
	opts := record.CorrelatorOptions{
		BurstSize:            DefaultEventBurst,
		QPS:                  DefaultEventQPS,
		MaxEvents:            DefaultEventAggregateMax,
		MaxIntervalInSeconds: int(DefaultEventAggregateInterval / time.Second),
	}
	b := record.NewBroadcaster(record.WithCorrelatorOptions(opts))
	writeCtx, cancelWrites := context.WithCancel(context.Background())
	done := make(chan struct{})
	if w, ok := b.(broadcastWatcher); ok {
		events, err := w.Watch()
		if err != nil {
			// A fresh broadcaster is never stopped.
			r.log.WithError(err).Error("cannot start recording events")
			close(done)
		} else {
			go r.write(writeCtx, record.NewEventCorrelatorWithOptions(opts), events, done)
		}
	} else {
		// A client-go whose broadcaster hides its watch: let it write.
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: r.client.Events("")})
		close(done)
	}
	r.mu.Lock()
	r.current = b.NewRecorder(r.scheme, r.source)
	r.mu.Unlock()

	return func() {
		r.mu.Lock()
		r.current = nil
		r.mu.Unlock()
		// Shutdown hands the queued Events to the writer and closes its
		// channel, so the writer drains them and ends.
		b.Shutdown()
		timer := time.NewTimer(DefaultEventFlushTimeout)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
			cancelWrites()
			<-done
		}
		cancelWrites()
	}
}

// write writes the Events of one term until the broadcaster shuts down.
func (r *eventRecorder) write(ctx context.Context, c *record.EventCorrelator, events kwatch.Interface, done chan<- struct{}) {
	defer close(done)
	defer events.Stop()
	dropped := 0
	for we := range events.ResultChan() {
		e, ok := we.Object.(*corev1.Event)
		switch {
		case !ok:
		case ctx.Err() != nil:
			dropped++
		default:
			r.writeOne(ctx, c, e)
		}
	}
	if dropped > 0 {
		r.log.WithField("dropped", dropped).Warn("events not written when Run returned are dropped")
	}
}

// writeOne writes one Event through the correlator, which drops spam,
// aggregates similar Events and turns a repeat into a count increment.
func (r *eventRecorder) writeOne(ctx context.Context, c *record.EventCorrelator, e *corev1.Event) {
	log := r.log.WithFields(logrus.Fields{
		"object": e.InvolvedObject.Kind + " " + e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name,
		"type":   e.Type, "reason": e.Reason,
	})
	result, err := c.EventCorrelate(e)
	if err != nil {
		log.WithError(err).Warn("event correlation failed")
	}
	if result == nil || result.Event == nil || result.Skip {
		log.Debug("event dropped by the rate limit")
		return
	}
	for try := 1; ; try++ {
		err := r.send(ctx, c, result.Event, result.Patch)
		if err == nil {
			log.WithField("count", result.Event.Count).Debug("event recorded")
			return
		}
		var status apierrors.APIStatus
		switch {
		case errors.As(err, &status) && (apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)):
			log.WithError(err).Debug("event refused by the API server")
			return
		case errors.As(err, &status):
			log.WithError(err).Error("event refused by the API server; not retrying")
			return
		case try >= eventMaxTries || ctx.Err() != nil:
			log.WithError(err).Error("cannot write event; dropping it")
			return
		}
		delay := eventRetryDelay
		if try == 1 {
			// Spread the retries of replicas that lost the server together.
			delay = time.Duration(rand.Float64() * float64(delay))
		}
		log.WithError(err).WithField("retry_in", delay).Warn("cannot write event; retrying")
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
}

// send creates the Event, or patches its count when it repeats one the
// correlator saw written.
func (r *eventRecorder) send(ctx context.Context, c *record.EventCorrelator, e *corev1.Event, patch []byte) error {
	events := r.client.Events(e.Namespace)
	var (
		saved *corev1.Event
		err   error
	)
	if e.Count > 1 {
		saved, err = events.Patch(ctx, e.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	}
	if e.Count <= 1 || apierrors.IsNotFound(err) {
		fresh := e.DeepCopy()
		fresh.ResourceVersion = ""
		saved, err = events.Create(ctx, fresh, metav1.CreateOptions{})
	}
	if err != nil {
		return err
	}
	c.UpdateState(saved)
	return nil
}

// logRecorder is a record.EventRecorder that logs Events and writes none.
type logRecorder struct {
	log logrus.FieldLogger
	why string
}

func (l *logRecorder) Event(object runtime.Object, eventtype, reason, message string) {
	l.AnnotatedEventf(object, nil, eventtype, reason, "%s", message)
}

func (l *logRecorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	l.AnnotatedEventf(object, nil, eventtype, reason, messageFmt, args...)
}

func (l *logRecorder) AnnotatedEventf(object runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	log := l.log.WithFields(logrus.Fields{"event_type": eventtype, "reason": reason, "message": fmt.Sprintf(messageFmt, args...)})
	if m, err := meta.Accessor(object); err == nil {
		log = log.WithField("object", m.GetNamespace()+"/"+m.GetName())
	}
	msg := "event not recorded: " + l.why
	if eventtype == corev1.EventTypeWarning {
		log.Warn(msg)
		return
	}
	log.Info(msg)
}
