package sdk_test

import (
	"context"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// eventsOf lists the Events about the object name in ns, by reason.
func eventsOf(t *testing.T, f *fixture, name string) map[string][]corev1.Event {
	t.Helper()
	list, err := f.env.Clientset().CoreV1().Events(f.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]corev1.Event{}
	for _, e := range list.Items {
		if e.InvolvedObject.Name == name {
			out[e.Reason] = append(out[e.Reason], e)
		}
	}
	return out
}

func countOf(events []corev1.Event) (sum int32) {
	for _, e := range events {
		sum += e.Count
	}
	return sum
}

// eventWriters returns the stacks of goroutines writing Events.
func eventWriters() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "pkg/sdk.(*eventRecorder).write") {
			out = append(out, g)
		}
	}
	return out
}

func TestHandlerEventsReachTheAPIServerAggregatedAndRateLimited(t *testing.T) {
	f := newFixture(t, sdk.WithEventSource("events-test"))
	ctx := context.Background()
	for _, name := range []string{"repeated", "varied", "spammy", "marker"} {
		f.createCM(t, name)
	}
	var once sync.Once
	err := f.op.Watch("v1", "ConfigMap", f.ns, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.op.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		if e.Object.(*corev1.ConfigMap).Name != "trigger" {
			return nil
		}
		var err error
		once.Do(func() {
			get := func(name string) *corev1.ConfigMap {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}
				if err == nil {
					err = query.For(sdk.OperatorFrom(ctx)).Get(ctx, cm)
				}
				return cm
			}
			repeated, varied, spammy, marker := get("repeated"), get("varied"), get("spammy"), get("marker")
			if err != nil {
				return
			}
			rec := sdk.EventRecorderFrom(ctx)
			for range 5 {
				rec.Event(repeated, corev1.EventTypeWarning, "Checked", "the same message")
			}
			for i := range 12 {
				rec.Eventf(varied, corev1.EventTypeNormal, "Varied", "message %d", i)
			}
			for range 40 {
				rec.Event(spammy, corev1.EventTypeNormal, "Spam", "again")
			}
			// Events are written in order, so once this one is there,
			// every Event above was written or dropped.
			rec.Event(marker, corev1.EventTypeNormal, "Marker", "last")
		})
		return err
	}))
	stop := f.start(t)
	f.createCM(t, "trigger")

	eventually(t, 30*time.Second, "marker event", func() bool { return len(eventsOf(t, f, "marker")["Marker"]) == 1 })

	// Identical Events become one object with a count.
	repeated := eventsOf(t, f, "repeated")["Checked"]
	if len(repeated) != 1 || repeated[0].Count != 5 {
		t.Fatalf("5 identical events became %d objects with counts %d, want 1 object with count 5", len(repeated), countOf(repeated))
	}
	e := repeated[0]
	cm, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Get(ctx, "repeated", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantInstance := os.Getenv("POD_NAME")
	if wantInstance == "" {
		wantInstance, _ = os.Hostname()
	}
	io := e.InvolvedObject
	switch {
	case e.Type != corev1.EventTypeWarning || e.Message != "the same message":
		t.Errorf("event type %q message %q", e.Type, e.Message)
	case io.Kind != "ConfigMap" || io.APIVersion != "v1" || io.Namespace != f.ns || io.Name != "repeated" || io.UID != cm.UID:
		t.Errorf("involvedObject = %+v, want the ConfigMap %s/repeated uid %s", io, f.ns, cm.UID)
	case e.Source.Component != "events-test" || e.ReportingController != "events-test":
		t.Errorf("source component %q, reporting controller %q, want events-test", e.Source.Component, e.ReportingController)
	case e.Source.Host != wantInstance || e.ReportingInstance != wantInstance:
		t.Errorf("source host %q, reporting instance %q, want %q", e.Source.Host, e.ReportingInstance, wantInstance)
	}

	// Similar Events with different messages: the tenth and later are
	// combined into one.
	varied := eventsOf(t, f, "varied")["Varied"]
	var combined []corev1.Event
	for _, e := range varied {
		if strings.HasPrefix(e.Message, "(combined from similar events)") {
			combined = append(combined, e)
		}
	}
	if len(varied) != 10 || len(combined) != 1 || combined[0].Count != 3 {
		t.Errorf("12 similar events became %d objects, %d combined (count %d); want 9 single ones and 1 combined with count 3",
			len(varied), len(combined), countOf(combined))
	}

	// The spam filter lets DefaultEventBurst Events about one object through.
	if got := countOf(eventsOf(t, f, "spammy")["Spam"]); got != sdk.DefaultEventBurst {
		t.Errorf("40 events about one object were written %d times, want the burst of %d", got, sdk.DefaultEventBurst)
	}

	if len(eventWriters()) == 0 {
		t.Fatal("no event writer goroutine while running; the check below would prove nothing")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if g := eventWriters(); len(g) > 0 {
		t.Errorf("event writer still running after Run returned:\n%s", strings.Join(g, "\n\n"))
	}
	// After Run the recorder logs instead of writing, and does not panic.
	f.op.EventRecorder().Event(cm, corev1.EventTypeNormal, "AfterRun", "not written")
	// A deliberate pause, not a wait: it proves that no event is written. The writers were already
	// checked gone above, so nothing could write it later either.
	time.Sleep(200 * time.Millisecond)
	if got := eventsOf(t, f, "repeated")["AfterRun"]; len(got) != 0 {
		t.Errorf("an event recorded after Run was written: %+v", got)
	}
}

func TestEventRecorderFromOutsideAHandlingLogs(t *testing.T) {
	log, buf := jsonLogger()
	ctx := sdk.WithLoggerContext(context.Background(), log)
	rec := sdk.EventRecorderFrom(ctx)
	if rec == nil {
		t.Fatal("EventRecorderFrom returned nil")
	}
	cm := configMap("ns", "cm", nil)
	rec.Eventf(cm, corev1.EventTypeWarning, "Broken", "value %d", 7)
	line := buf.lineWith(t, "Broken")
	if line["level"] != "warning" || line["message"] != "value 7" || line["object"] != "ns/cm" {
		t.Errorf("logged %v", line)
	}
}

// Run writes the Events that handlers recorded before it returns.
func TestEventsRecordedBeforeRunReturnsAreWritten(t *testing.T) {
	f := newFixture(t)
	recorded := make(chan struct{})
	var once sync.Once
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		once.Do(func() {
			rec := sdk.EventRecorderFrom(ctx)
			for i := range 20 {
				rec.Eventf(e.Object, corev1.EventTypeNormal, "Flushed", "event %d", i)
			}
			close(recorded)
		})
		return nil
	}))
	stop := f.start(t)
	f.createCM(t, "flush")
	<-recorded
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// 9 single Events and one combining the other 11.
	got := eventsOf(t, f, "flush")["Flushed"]
	if len(got) != 10 || countOf(got) != 20 {
		t.Errorf("after Run returned, %d Events with counts %d were written; want all 20 recorded (10 objects)", len(got), countOf(got))
	}
}
