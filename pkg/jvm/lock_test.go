package jvm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestConcurrentInjectsLoadTheAgentOnce runs two injections of one JVM at the same time, as two operator
// replicas would: the per-JVM lock lets one load the agent and the other find its marker.
func TestConcurrentInjectsLoadTheAgentOnce(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv, _ := startInspected(t)
	port := freePort(t)
	dir := testTargetDir(t)
	var wg sync.WaitGroup
	results := make([]InjectResult, 2)
	start := make(chan struct{})
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := newTestInjector(t, WithTargetDir(dir))
			<-start
			results[i] = in.Inject(context.Background(), jv.Pid, loopbackAgent(port))
		}()
	}
	close(start)
	wg.Wait()
	statuses := map[Outcome]int{}
	for _, r := range results {
		statuses[r.Status]++
	}
	if statuses[OutcomeOK] != 1 || statuses[OutcomeAlreadyInjected] != 1 {
		t.Fatalf("results %+v: want exactly one ok and one already-injected", results)
	}
	if n := strings.Count(jv.Output(), "handlerkit test agent: serving /metrics"); n != 1 {
		t.Fatalf("the agent started %d times, want 1; JVM output:\n%s", n, jv.Output())
	}
	entries, _ := filepath.Glob(filepath.Join(dir, AgentDirPrefix+"*"))
	if len(entries) != 1 {
		t.Fatalf("copies %v: want one directory", entries)
	}
	scrapeHeap(t, jv.Pid, port)
}

// TestLockFileOfAnotherUserIsRefused plants the lock file of a JVM as another user, and as root with access for
// others: either could hold the lock forever or swap it, so the JVM is refused with lock-failed, untouched.
func TestLockFileOfAnotherUserIsRefused(t *testing.T) {
	t.Parallel()
	needJava(t)
	cases := map[string]struct {
		uid  int
		mode os.FileMode
		want string
	}{
		"other user":      {uid: 4242, mode: 0o600, want: "owned by uid 4242"},
		"readable by all": {uid: 0, mode: 0o644, want: "group or others have access"},
		"other user 0666": {uid: 4242, mode: 0o666, want: "owned by uid 4242"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			jv, j := startInspected(t)
			lock := lockPath(j)
			if err := os.WriteFile(lock, nil, c.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(lock, c.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(lock, c.uid, c.uid); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(lock) })
			res := newTestInjector(t, WithTargetDir(testTargetDir(t))).Inject(context.Background(), jv.Pid, loopbackAgent(freePort(t)))
			if res.Reason != ReasonLockFailed || !strings.Contains(res.Message, c.want) {
				t.Fatalf("result %+v, want %s saying %q", res, ReasonLockFailed, c.want)
			}
			assertUntouched(t, jv)
		})
	}
}

// TestLockIsHeldAgainstASecondInjection holds a JVM's lock as another jmx-attach would and checks that an
// injection waits for it and, when it is not released in time, fails with lock-failed without touching the JVM.
func TestLockIsHeldAgainstASecondInjection(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv, j := startInspected(t)
	held, err := lockJVM(context.Background(), j, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	res := newTestInjector(t, WithTargetDir(testTargetDir(t))).Inject(ctx, jv.Pid, loopbackAgent(freePort(t)))
	if res.Reason != ReasonLockFailed {
		t.Fatalf("result %+v, want %s", res, ReasonLockFailed)
	}
	assertUntouched(t, jv)
	held.unlock()
	port := freePort(t)
	requireOK(t, newTestInjector(t, WithTargetDir(testTargetDir(t))).Inject(context.Background(), jv.Pid, loopbackAgent(port)))
	scrapeHeap(t, jv.Pid, port)
}

func TestInjectResultCarriesTheJVMsStartTime(t *testing.T) {
	t.Parallel()
	needJava(t)
	before := time.Now()
	jv, j := startInspected(t)
	again, err := Inspect(jv.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !j.StartTime.Equal(again.StartTime) {
		t.Fatalf("start time changed between inspections: %s, %s", j.StartTime, again.StartTime)
	}
	if d := j.StartTime.Sub(before); d < -time.Second || d > time.Minute {
		t.Fatalf("start time %s is %s after the test started the JVM", j.StartTime, d)
	}
	res := newTestInjector(t, WithTargetDir(testTargetDir(t))).Inject(context.Background(), jv.Pid, loopbackAgent(freePort(t)))
	requireOK(t, res)
	if !res.StartedAt.Equal(j.StartTime) {
		t.Fatalf("startedAt %s, want %s", res.StartedAt, j.StartTime)
	}
	line, _ := res.MarshalLine()
	back, err := ParseInjectResult(line)
	if err != nil || !back.StartedAt.Equal(j.StartTime) || !strings.Contains(string(line), `"startedAt":"`) {
		t.Fatalf("line %s parsed as %+v, %v", line, back, err)
	}
}
