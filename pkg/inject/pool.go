package inject

import (
	"context"
	"sync"
)

// Pool runs injection jobs in the background: at most Size hold a slot at
// once, and never two jobs with the same key at once (the operator keys jobs
// by pod, so one container is never injected twice at once, whatever mix of
// events asks).
//
// Free slots go round-robin between groups (the operator's group is the
// exporter, namespace/name): each group with queued jobs in turn starts its
// oldest one, so one group's backlog cannot starve another's.
//
// A job holds its slot while it works the API (reads the pod, adds the
// ephemeral container, opens the exec, writes its record), not while it waits
// for something outside the operator: Idle gives the slot back for such a
// wait (jmx-attach looking for a JVM, the pod cache catching up) and Resume
// takes one again, ahead of jobs that have not started. So a container
// without a JVM, whose helper waits up to --jvm-wait, holds no slot
// meanwhile.
type Pool struct {
	mu      sync.Mutex
	size    int
	free    int
	running map[string]struct{} // keys queued or running
	queues  map[string][]*poolEntry
	ring    []string    // groups with queued jobs, in turn order
	resume  []*poolSlot // jobs back from Idle that wait for a slot, first come first served
	granted map[*poolSlot]chan struct{}
	wg      sync.WaitGroup
}

// poolEntry is one job. Its state is guarded by the pool's mutex.
type poolEntry struct {
	ctx   context.Context
	key   string
	job   func(ctx context.Context)
	then  func()
	state int // entryQueued, entryStarted or entryDropped
	stop  func() bool
	slot  *poolSlot
}

const (
	entryQueued = iota
	entryStarted
	entryDropped
)

// poolSlot is a job's claim on a slot; held is guarded by the pool's mutex.
type poolSlot struct {
	p    *Pool
	held bool
}

type slotKey struct{}

// NewPool returns a Pool that runs at most size jobs at once (at least 1).
func NewPool(size int) *Pool {
	if size < 1 {
		size = 1
	}
	return &Pool{size: size, free: size, running: map[string]struct{}{}, queues: map[string][]*poolEntry{},
		granted: map[*poolSlot]chan struct{}{}}
}

// TryRun starts job in a goroutine unless a job with key is queued or running,
// and reports whether it started it. The job waits for a free slot; ctx
// ending while it waits drops it. The job gets ctx and should stop when it
// ends.
func (p *Pool) TryRun(ctx context.Context, key string, job func(ctx context.Context)) bool {
	return p.TryRunFor(ctx, "", key, job, nil)
}

// TryRunThen is TryRun that calls then (when not nil) once the job has
// returned, or was dropped, and key is free again: a look that then
// triggers sees the job done and may start the next job with key.
func (p *Pool) TryRunThen(ctx context.Context, key string, job func(ctx context.Context), then func()) bool {
	return p.TryRunFor(ctx, "", key, job, then)
}

// TryRunFor is TryRunThen for a job of group: free slots go round-robin
// between the groups with queued jobs, oldest job first within a group.
func (p *Pool) TryRunFor(ctx context.Context, group, key string, job func(ctx context.Context), then func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, busy := p.running[key]; busy {
		return false
	}
	p.running[key] = struct{}{}
	p.wg.Add(1)
	e := &poolEntry{ctx: ctx, key: key, job: job, then: then, slot: &poolSlot{p: p}}
	if len(p.queues[group]) == 0 {
		p.ring = append(p.ring, group)
	}
	p.queues[group] = append(p.queues[group], e)
	// A job dropped while queued costs no goroutine until its context ends.
	e.stop = context.AfterFunc(ctx, func() {
		p.mu.Lock()
		if e.state != entryQueued {
			p.mu.Unlock()
			return
		}
		e.state = entryDropped // the dispatcher skips it
		p.mu.Unlock()
		p.finish(e)
	})
	p.dispatch()
	return true
}

// dispatch hands out the free slots: to jobs back from Idle first, then
// round-robin to the groups' queued jobs. p.mu is held.
func (p *Pool) dispatch() {
	for p.free > 0 {
		if len(p.resume) > 0 {
			s := p.resume[0]
			p.resume = p.resume[1:]
			p.free--
			s.held = true
			close(p.granted[s])
			delete(p.granted, s)
			continue
		}
		if len(p.ring) == 0 {
			return
		}
		group := p.ring[0]
		p.ring = p.ring[1:]
		q := p.queues[group]
		e := q[0]
		q[0] = nil
		if q = q[1:]; len(q) > 0 {
			p.queues[group] = q
			p.ring = append(p.ring, group)
		} else {
			delete(p.queues, group)
		}
		if e.state != entryQueued {
			continue // dropped while it waited
		}
		e.state = entryStarted
		e.stop()
		p.free--
		e.slot.held = true
		go p.run(e)
	}
}

func (p *Pool) run(e *poolEntry) {
	defer p.finish(e)
	if e.ctx.Err() != nil {
		return // ended while it waited
	}
	e.job(context.WithValue(e.ctx, slotKey{}, e.slot))
}

// finish gives back e's slot, frees its key, and calls then.
func (p *Pool) finish(e *poolEntry) {
	p.mu.Lock()
	if e.slot.held {
		e.slot.held = false
		p.free++
	}
	delete(p.running, e.key)
	p.dispatch()
	p.mu.Unlock()
	if e.then != nil {
		e.then()
	}
	p.wg.Done()
}

// Idle gives back the slot of the pool job that ctx belongs to, for a wait
// on something outside the operator; Resume takes one again. It does
// nothing when the job holds no slot, or ctx is not a pool job's.
func Idle(ctx context.Context) {
	s, ok := ctx.Value(slotKey{}).(*poolSlot)
	if !ok {
		return
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.held {
		s.held = false
		p.free++
		p.dispatch()
	}
}

// Resume takes a slot again for the pool job that ctx belongs to, after
// Idle: ahead of the jobs that have not started, behind the ones that came
// back from a wait earlier. It returns ctx's error when ctx ends first, and
// nil at once when the job holds its slot or ctx is not a pool job's.
func Resume(ctx context.Context) error {
	s, ok := ctx.Value(slotKey{}).(*poolSlot)
	if !ok {
		return nil
	}
	p := s.p
	p.mu.Lock()
	if s.held {
		p.mu.Unlock()
		return nil
	}
	if p.free > 0 {
		p.free--
		s.held = true
		p.mu.Unlock()
		return nil
	}
	ch, waiting := p.granted[s]
	if !waiting {
		ch = make(chan struct{})
		p.granted[s] = ch
		p.resume = append(p.resume, s)
	}
	p.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		defer p.mu.Unlock()
		if _, still := p.granted[s]; still {
			delete(p.granted, s)
			for i, w := range p.resume {
				if w == s {
					p.resume = append(p.resume[:i], p.resume[i+1:]...)
					break
				}
			}
		}
		// A slot granted meanwhile stays the job's until it returns.
		return ctx.Err()
	}
}

// Busy reports whether a job with key is queued or running.
func (p *Pool) Busy(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.running[key]
	return ok
}

// Len is the number of jobs queued or running.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.running)
}

// Held is the number of slots that jobs hold now (the other jobs are
// queued, or idle in a wait).
func (p *Pool) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.size - p.free
}

// Wait blocks until every job started so far has returned.
func (p *Pool) Wait() { p.wg.Wait() }
