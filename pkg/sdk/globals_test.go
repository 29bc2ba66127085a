package sdk_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/go-logr/logr/funcr"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// The first New of a process, and package sdk's init, touch process-wide
// state: client-go's metric hooks and klog's logger. Tests of that state
// run the test binary again (runChild), so that the child is a fresh
// process in which nothing has happened yet.
const (
	// childEnv selects what the child runs: one of the child* modes.
	childEnv = "HANDLERKIT_SDK_TEST_CHILD"
	// klogFlagsEnv holds klog's flags for the klog child.
	klogFlagsEnv = "HANDLERKIT_SDK_TEST_KLOG_FLAGS"

	childRace      = "race"
	childKlog      = "klog"
	childOwnLogger = "ownlogger"

	// childDone is printed by a child that ran to its end.
	childDone = "sdk test child: done"
)

// runChild runs the test named name in a new process of this test binary
// with childEnv=mode and the given extra environment, and returns its
// stdout and stderr. It fails t when the child does not exit 0, when the
// race detector reported a race in it, or when it did not reach its end.
func runChild(t *testing.T, name, mode string, env ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	// atexit_sleep_ms=0: the race detector's runtime otherwise sleeps 1s
	// before a child exits.
	cmd.Env = append(append(os.Environ(), childEnv+"="+mode, "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0"), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	stdout, stderr = out.String(), errOut.String()
	t.Logf("child %s ran %s", mode, time.Since(start).Round(time.Millisecond))
	show := func() string { return "stdout:\n" + tail(stdout) + "\nstderr:\n" + tail(stderr) }
	switch races := raceReports(stdout + stderr); {
	case len(races) > 0:
		var sum []string
		for _, r := range races {
			sum = append(sum, raceSummary(r))
		}
		t.Fatalf("the race detector reported %d races in the child (%v):\n%s\nthe first:\n%s\nstdout:\n%s",
			len(races), err, strings.Join(sum, "\n"), strings.Join(races[:min(len(races), 3)], "\n"), tail(stdout))
	case err != nil:
		t.Fatalf("child: %v\n%s", err, show())
	case !strings.Contains(stdout, childDone):
		t.Fatalf("the child did not run to its end:\n%s", show())
	}
	return stdout, stderr
}

// raceReports returns the race detector's reports in s.
func raceReports(s string) []string {
	const start, end = "WARNING: DATA RACE", "=================="
	var out []string
	for {
		i := strings.Index(s, start)
		if i < 0 {
			return out
		}
		s = s[i:]
		j := strings.Index(s, end)
		if j < 0 {
			j = len(s)
		}
		out = append(out, s[:j])
		s = s[j:]
	}
}

// raceSummary names the two accesses of a race report by their innermost
// functions.
func raceSummary(report string) string {
	var accesses []string
	lines := strings.Split(report, "\n")
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if (strings.HasPrefix(l, "Read at") || strings.HasPrefix(l, "Write at") || strings.HasPrefix(l, "Previous ")) && i+1 < len(lines) {
			access, _, _ := strings.Cut(strings.TrimPrefix(l, "Previous "), " at ")
			accesses = append(accesses, strings.ToLower(access)+" in "+strings.TrimSpace(lines[i+1]))
		}
	}
	return "  " + strings.Join(accesses, ", against a ")
}

// tail returns the last 200 lines of s.
func tail(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 200 {
		lines = append([]string{fmt.Sprintf("[%d lines before]", len(lines)-200)}, lines[len(lines)-200:]...)
	}
	return strings.Join(lines, "\n")
}

// New may be called while other goroutines of the process already use
// client-go and klog: clients made before New or beside it (a second
// Operator's, the program's own) send requests, whose path reads
// client-go's metric hooks, and client-go logs through klog.Background,
// klog.FromContext and klog's functions, which read klog's logger. New
// writes neither: package sdk sets both at init, so the child, built with
// -race, reports no race. The child also checks that klog's lines reach
// the Operator's logger and that client-go's requests are counted from
// the start, before New.
func TestNewBesideRunningClientGoAndKlogIsRaceFree(t *testing.T) {
	if os.Getenv(childEnv) == childRace {
		raceChild(t)
		return
	}
	if !raceEnabled {
		t.Log("this test binary was built without -race: the child cannot detect data races, only check that New routes klog and counts requests (go test -race detects them)")
	}
	runChild(t, t.Name(), childRace)
}

func raceChild(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/version":
			fmt.Fprint(w, `{"major":"1","minor":"36","gitVersion":"v1.36.0"}`)
		case "/api/v1/pods":
			fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, QPS: 1000, Burst: 1000}
	// The program's own clientset, made before any New.
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// The loops stop between steps, never by cancelling a request: a
	// request cancelled before it was sent is not in client-go's metric,
	// and the count below must be exact (seen once: 95 counted of 96).
	ctx := context.Background()
	var wg sync.WaitGroup
	var requests, logged atomic.Int64
	var stopping atomic.Bool
	loop := func(step func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopping.Load() {
				if err := step(); err != nil {
					t.Errorf("child: %v", err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	loop(func() error {
		_, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		requests.Add(1)
		return err
	})
	loop(func() error {
		_, err := cs.Discovery().ServerVersion()
		requests.Add(1)
		return err
	})
	loop(func() error {
		klog.Background().Info("race: background")
		klog.FromContext(ctx).Info("race: from context")
		klog.InfoS("race: infos")
		logged.Add(1)
		return nil
	})
	stop := func() {
		stopping.Store(true)
		wg.Wait()
	}
	defer stop()
	// atLeast waits until n more requests and klog calls happened.
	atLeast := func(what string, n int64) {
		t.Helper()
		r, l := requests.Load(), logged.Load()
		eventually(t, time.Minute, what, func() bool { return requests.Load() >= r+n && logged.Load() >= l+n })
	}
	atLeast("requests and klog calls before New", 20)

	// The first New of the process, while the goroutines run.
	log, buf := jsonLogger()
	reg := newRegistry()
	if _, err := sdk.New(cfg, sdk.WithRegisterer(reg), sdk.WithLogger(log)); err != nil {
		t.Fatal(err)
	}
	atLeast("requests and klog calls after New", 20)
	for _, msg := range []string{"race: background", "race: from context", "race: infos"} {
		buf.lineWith(t, msg)
	}

	// Two more Operators at once, one of them routing klog.
	var news sync.WaitGroup
	log2, buf2 := jsonLogger()
	log3, buf3 := jsonLogger()
	for _, opts := range [][]sdk.Option{
		{sdk.WithRegisterer(newRegistry()), sdk.WithLogger(log2)},
		{sdk.WithRegisterer(newRegistry()), sdk.WithLogger(log3), sdk.WithoutKlogRouting()},
	} {
		news.Add(1)
		go func() {
			defer news.Done()
			if _, err := sdk.New(cfg, opts...); err != nil {
				t.Error(err)
			}
		}()
	}
	news.Wait()
	atLeast("requests and klog calls after the other News", 20)
	buf2.lineWith(t, "race: infos")
	stop()
	// The hooks were set before the goroutines started: every request is
	// counted, the ones sent before New too.
	if got, sent := sumMatching(t, reg, "rest_client_requests_total", nil), requests.Load(); got != float64(sent) {
		t.Errorf("rest_client_requests_total = %v, want the %d requests sent", got, sent)
	}
	if buf3.contains("race:") {
		t.Error("an Operator made WithoutKlogRouting received klog's lines")
	}
	if !t.Failed() {
		fmt.Println(childDone)
	}
}

// Until an Operator routes klog (and with only Operators made
// WithoutKlogRouting), klog's lines go to stderr as klog itself writes
// them: the child logs the same lines through package sdk's sink and,
// after klog.ClearLogger, through klog's own output, and the two must be
// the same but for the time, under klog's -v and -vmodule. The file and
// line of each header must be the caller's, which -vmodule depends on too.
func TestKlogWithoutRoutingWritesKlogsTextFormatToStderr(t *testing.T) {
	if os.Getenv(childEnv) == childKlog {
		klogChild(t)
		return
	}
	for _, c := range []struct {
		flags   string
		verbose bool // whether the V(2) lines are written
	}{
		{"-v=0", false},
		{"-v=2", true},
		{"-v=0 -vmodule=globals_test=2", true},
		{"-v=0 -vmodule=other=2", false},
	} {
		t.Run(c.flags, func(t *testing.T) {
			_, stderr := runChild(t, "TestKlogWithoutRoutingWritesKlogsTextFormatToStderr", childKlog, klogFlagsEnv+"="+c.flags)
			sink, own, extra := klogSections(t, stderr)
			if len(sink) == 0 || strings.Join(sink, "\n") != strings.Join(own, "\n") {
				t.Errorf("package sdk's sink wrote\n%s\nklog itself wrote\n%s", strings.Join(sink, "\n"), strings.Join(own, "\n"))
			}
			for _, want := range []string{
				`I globals_test.go:NN] "fallback structured" key="value" n=3`,
				`E globals_test.go:NN] "fallback error" err="boom" object="ns/name"`,
				`I globals_test.go:NN] "fallback named" logger="client" a=1`,
			} {
				if !containsLine(sink, want) {
					t.Errorf("no line %s in\n%s", want, strings.Join(sink, "\n"))
				}
			}
			for _, v2 := range []string{`"fallback global V(2)"`, `"fallback contextual V(2)"`} {
				if got := strings.Contains(strings.Join(sink, "\n"), v2); got != c.verbose {
					t.Errorf("line %s written: %v, want %v, with %s", v2, got, c.verbose, c.flags)
				}
			}
			// klog's printf-style functions give a logger one message:
			// the sink writes it as a quoted structured message.
			for _, want := range []string{`globals_test.go:NN] "fallback printf 7"`, `globals_test.go:NN] "fallback warning"`} {
				if !strings.Contains(lineNumber.ReplaceAllString(strings.Join(extra, "\n"), ":NN] "), want) {
					t.Errorf("no line with %s in\n%s", want, strings.Join(extra, "\n"))
				}
			}
		})
	}
}

// Markers between the child's sections of stderr.
const (
	markSink  = "=== through package sdk's sink"
	markOwn   = "=== through klog's own output"
	markExtra = "=== printf-style, through package sdk's sink"
)

func klogChild(t *testing.T) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	if err := fs.Parse(strings.Fields(os.Getenv(klogFlagsEnv))); err != nil {
		t.Fatal(err)
	}
	// An Operator that does not route klog changes nothing.
	log, buf := jsonLogger()
	if _, err := sdk.New(offline(), sdk.WithRegisterer(newRegistry()), sdk.WithLogger(log), sdk.WithoutKlogRouting()); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(os.Stderr, markExtra)
	klog.Infof("fallback printf %d", 7)
	klog.Warning("fallback warning")
	fmt.Fprintln(os.Stderr, markSink)
	logKlogLines()
	// Nothing else logs in this process now, so klog's logger may change.
	klog.ClearLogger()
	fmt.Fprintln(os.Stderr, markOwn)
	logKlogLines()
	if buf.contains("fallback") {
		t.Error("an Operator made WithoutKlogRouting received klog's lines")
	}
	if !t.Failed() {
		fmt.Println(childDone)
	}
}

// logKlogLines logs the same lines, from the same lines of code, each time.
func logKlogLines() {
	klog.InfoS("fallback structured", "key", "value", "n", 3)
	klog.ErrorS(errors.New("boom"), "fallback error", "object", klog.KRef("ns", "name"))
	klog.V(2).InfoS("fallback global V(2)")
	klog.Background().V(2).Info("fallback contextual V(2)")
	klog.Background().WithName("client").WithValues("a", 1).Info("fallback named")
	klog.FromContext(context.Background()).Error(errors.New("bad"), "fallback contextual error", "k", []int{1, 2})
}

// klogHeader is the header of klog's text format: severity, date, time,
// thread id, file and line.
var klogHeader = regexp.MustCompile(`^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d{6}\s+\d+ ([^ :]+):(\d+)\] `)

// klogSections splits the klog child's stderr at the markers, with the
// time and thread id taken out of each header; the sink's and klog's own
// lines keep their line numbers, which must be the same, and the
// printf-style lines get NN.
func klogSections(t *testing.T, stderr string) (sink, own, extra []string) {
	t.Helper()
	var cur *[]string
	for _, l := range strings.Split(stderr, "\n") {
		switch l {
		case markSink:
			cur = &sink
			continue
		case markOwn:
			cur = &own
			continue
		case markExtra:
			cur = &extra
			continue
		}
		if cur == nil || l == "" {
			continue
		}
		m := klogHeader.FindStringSubmatch(l)
		if m == nil {
			if strings.HasPrefix(l, "=== RUN") || strings.HasPrefix(l, "--- ") {
				continue
			}
			t.Errorf("not a line in klog's format: %q", l)
			continue
		}
		*cur = append(*cur, m[1]+" "+m[2]+":"+m[3]+"] "+l[len(m[0]):])
	}
	return sink, own, extra
}

var lineNumber = regexp.MustCompile(`:\d+\] `)

// containsLine reports whether lines has want, with NN for the line number.
func containsLine(lines []string, want string) bool {
	for _, l := range lines {
		if lineNumber.ReplaceAllString(l, ":NN] ") == want {
			return true
		}
	}
	return false
}

// A program that sets klog's logger itself, after package sdk's init and
// before it starts goroutines, keeps it: New cannot route klog then, and
// says so unless given WithoutKlogRouting.
func TestKlogLoggerSetByTheProgramStays(t *testing.T) {
	if os.Getenv(childEnv) == childOwnLogger {
		ownLoggerChild(t)
		return
	}
	runChild(t, t.Name(), childOwnLogger)
}

func ownLoggerChild(t *testing.T) {
	var mu sync.Mutex
	var own []string
	klog.SetLogger(funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		own = append(own, args)
	}, funcr.Options{}))
	const warning = "klog's logger was replaced"

	log, buf := jsonLogger()
	if _, err := sdk.New(offline(), sdk.WithRegisterer(newRegistry()), sdk.WithLogger(log)); err != nil {
		t.Fatal(err)
	}
	buf.lineWith(t, warning)
	quiet, quietBuf := jsonLogger()
	if _, err := sdk.New(offline(), sdk.WithRegisterer(newRegistry()), sdk.WithLogger(quiet), sdk.WithoutKlogRouting()); err != nil {
		t.Fatal(err)
	}
	if quietBuf.contains(warning) {
		t.Error("New warned about klog's logger though given WithoutKlogRouting")
	}

	klog.InfoS("to the program's logger")
	mu.Lock()
	got := strings.Join(own, "\n")
	mu.Unlock()
	if !strings.Contains(got, "to the program's logger") {
		t.Errorf("the program's klog logger did not receive klog's line; it has %q", got)
	}
	if buf.contains("to the program's logger") {
		t.Error("klog's line reached the Operator's logger, past the program's own klog logger")
	}
	if !t.Failed() {
		fmt.Println(childDone)
	}
}
