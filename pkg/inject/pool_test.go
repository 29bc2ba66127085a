package inject

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// gatedJobs are pool jobs that say when they start and run until released,
// so that a test decides the order of everything (no timing).
type gatedJobs struct {
	started chan string
	release map[string]chan struct{}
}

func newGatedJobs() *gatedJobs {
	return &gatedJobs{started: make(chan string, 100), release: map[string]chan struct{}{}}
}

func (g *gatedJobs) job(name string) func(context.Context) {
	ch := make(chan struct{})
	g.release[name] = ch
	return func(ctx context.Context) {
		g.started <- name
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}

// next returns the job that started next (a test failure after 10 s: the
// pool started none).
func (g *gatedJobs) next(t *testing.T) string {
	t.Helper()
	select {
	case name := <-g.started:
		return name
	case <-time.After(10 * time.Second):
		t.Fatal("no job started")
		return ""
	}
}

// TestPoolSharesSlotsRoundRobinBetweenGroups: exporter A has 50 jobs queued
// behind one running, exporter B queues 1; B's job starts as soon as A has
// had its turn, long before A's backlog is done, and A's jobs keep their
// order.
func TestPoolSharesSlotsRoundRobinBetweenGroups(t *testing.T) {
	p := NewPool(1)
	g := newGatedJobs()
	for i := 1; i <= 51; i++ {
		name := fmt.Sprintf("a%d", i)
		if !p.TryRunFor(context.Background(), "ns/a", name, g.job(name), nil) {
			t.Fatalf("%s not queued", name)
		}
	}
	if !p.TryRunFor(context.Background(), "ns/b", "b1", g.job("b1"), nil) {
		t.Fatal("b1 not queued")
	}
	var order []string
	for range 52 {
		name := g.next(t)
		order = append(order, name)
		if held := p.Held(); held != 1 {
			t.Fatalf("%d slots held, want 1", held)
		}
		close(g.release[name])
	}
	p.Wait()
	b := -1
	for i, name := range order {
		if name == "b1" {
			b = i
		}
	}
	// a1 took the free slot at once; a2 was queued (and A's turn taken)
	// before b1 arrived; then B's turn.
	if b < 0 || b > 2 {
		t.Fatalf("b1 started as job %d of 52 (order %v), want among the first 3", b+1, order)
	}
	k := 1
	for _, name := range order {
		if name == "b1" {
			continue
		}
		if want := fmt.Sprintf("a%d", k); name != want {
			t.Fatalf("A's jobs out of order: %v", order)
		}
		k++
	}
}

// TestPoolTurnsAlternateBetweenBusyGroups: with two groups' backlogs queued,
// slots alternate between them.
func TestPoolTurnsAlternateBetweenBusyGroups(t *testing.T) {
	p := NewPool(1)
	g := newGatedJobs()
	block := make(chan struct{})
	p.TryRun(context.Background(), "first", func(context.Context) { <-block })
	for i := 1; i <= 3; i++ {
		for _, grp := range []string{"x", "y"} {
			name := fmt.Sprintf("%s%d", grp, i)
			p.TryRunFor(context.Background(), grp, name, g.job(name), nil)
		}
	}
	close(block)
	var order []string
	for range 6 {
		name := g.next(t)
		order = append(order, name)
		close(g.release[name])
	}
	p.Wait()
	if got := fmt.Sprint(order); got != "[x1 y1 x2 y2 x3 y3]" {
		t.Fatalf("order %s, want the groups alternating", got)
	}
}

// TestIdleLendsTheSlotAndResumeComesFirst: a job that waits (Idle) holds
// no slot, so a queued job runs meanwhile; on Resume it gets the next free
// slot ahead of jobs that have not started.
func TestIdleLendsTheSlotAndResumeComesFirst(t *testing.T) {
	p := NewPool(1)
	g := newGatedJobs()
	idle, back := make(chan struct{}), make(chan struct{})
	resumed := make(chan error, 1)
	p.TryRunFor(context.Background(), "a", "waiter", func(ctx context.Context) {
		Idle(ctx)
		close(idle)
		<-back
		resumed <- Resume(ctx)
		g.started <- "waiter-resumed"
	}, nil)
	<-idle
	if held := p.Held(); held != 0 {
		t.Fatalf("%d slots held while the only job waits, want 0", held)
	}
	p.TryRunFor(context.Background(), "b", "other", g.job("other"), nil)
	if name := g.next(t); name != "other" {
		t.Fatalf("%s started, want other (the waiter lent its slot)", name)
	}
	// The waiter comes back while other holds the only slot; a new job
	// queues after that.
	close(back)
	waitFor(t, func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.resume) == 1 })
	p.TryRunFor(context.Background(), "c", "late", g.job("late"), nil)
	close(g.release["other"])
	if name := g.next(t); name != "waiter-resumed" {
		t.Fatalf("%s got the slot, want the waiter back from its wait", name)
	}
	if err := <-resumed; err != nil {
		t.Fatal(err)
	}
	if name := g.next(t); name != "late" {
		t.Fatalf("%s, want late", name)
	}
	close(g.release["late"])
	p.Wait()
	if held := p.Held(); held != 0 {
		t.Fatalf("%d slots held after every job, want 0", held)
	}
	// Outside a pool job Idle and Resume do nothing.
	Idle(context.Background())
	if err := Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestResumeEndsWithItsContext: a job whose context ends while it waits to
// resume gets the context's error and leaves the slots as they were.
func TestResumeEndsWithItsContext(t *testing.T) {
	p := NewPool(1)
	g := newGatedJobs()
	ctx, cancel := context.WithCancel(context.Background())
	idle, back := make(chan struct{}), make(chan struct{})
	resumed := make(chan error, 1)
	p.TryRunFor(ctx, "a", "waiter", func(ctx context.Context) {
		Idle(ctx)
		close(idle)
		<-back
		resumed <- Resume(ctx) // blocks: "other" holds the slot
	}, nil)
	<-idle
	p.TryRunFor(context.Background(), "b", "other", g.job("other"), nil)
	g.next(t)
	close(back)
	waitFor(t, func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.resume) == 1 })
	cancel()
	if err := <-resumed; !errors.Is(err, context.Canceled) {
		t.Fatalf("Resume returned %v, want context.Canceled", err)
	}
	close(g.release["other"])
	p.Wait()
	if held, n := p.Held(), p.Len(); held != 0 || n != 0 {
		t.Fatalf("%d slots held, %d jobs, want none", held, n)
	}
	p.mu.Lock()
	left := len(p.resume) + len(p.granted)
	p.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d waiters left behind", left)
	}
}

// waitFor polls cond (the pool's own state, which has no event to wait on)
// until it holds, for at most 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestExecLendsItsSlotOnceItsBundleIsSent: the Exec strategy's stdin gives
// the slot back when it is all read (jmx-attach then waits for a JVM with
// the exec open), and not after the exec returned.
func TestExecLendsItsSlotOnceItsBundleIsSent(t *testing.T) {
	p := NewPool(1)
	var sent, resumed, late int
	p.TryRun(context.Background(), "a", func(ctx context.Context) {
		in := &idleAtEOF{ctx: ctx, r: strings.NewReader("bundle")}
		if _, err := io.ReadAll(in); err != nil {
			t.Error(err)
		}
		sent = p.Held()
		in.done()
		if err := Resume(ctx); err != nil {
			t.Error(err)
		}
		resumed = p.Held()
		after := &idleAtEOF{ctx: ctx, r: strings.NewReader("x")}
		after.done()
		_, _ = io.ReadAll(after)
		late = p.Held()
	})
	p.Wait()
	if sent != 0 || resumed != 1 || late != 1 {
		t.Fatalf("slots held: %d once sent (want 0), %d resumed (want 1), %d after a late end of stdin (want 1)", sent, resumed, late)
	}
}
