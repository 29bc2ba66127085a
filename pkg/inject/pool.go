package inject

import (
	"context"
	"sync"
)

// Pool runs injection jobs in the background: at most Size at once, and never
// two jobs with the same key at once (the operator keys jobs by pod, so one
// container is never injected twice at once, whatever mix of events asks).
type Pool struct {
	sem     chan struct{}
	mu      sync.Mutex
	running map[string]struct{}
	wg      sync.WaitGroup
}

// NewPool returns a Pool that runs at most size jobs at once (at least 1).
func NewPool(size int) *Pool {
	if size < 1 {
		size = 1
	}
	return &Pool{sem: make(chan struct{}, size), running: map[string]struct{}{}}
}

// TryRun starts job in a goroutine unless a job with key is queued or running,
// and reports whether it started it. The job waits for a free slot; ctx
// ending while it waits drops it. The job gets ctx and should stop when it
// ends.
func (p *Pool) TryRun(ctx context.Context, key string, job func(ctx context.Context)) bool {
	return p.TryRunThen(ctx, key, job, nil)
}

// TryRunThen is TryRun that calls then (when not nil) once the job has
// returned, or was dropped, and key is free again: a look that then
// triggers sees the job done and may start the next job with key.
func (p *Pool) TryRunThen(ctx context.Context, key string, job func(ctx context.Context), then func()) bool {
	p.mu.Lock()
	if _, busy := p.running[key]; busy {
		p.mu.Unlock()
		return false
	}
	p.running[key] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer func() {
			p.mu.Lock()
			delete(p.running, key)
			p.mu.Unlock()
			if then != nil {
				then()
			}
			p.wg.Done()
		}()
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-p.sem }()
		if ctx.Err() != nil {
			return // ended while it waited
		}
		job(ctx)
	}()
	return true
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

// Wait blocks until every job started so far has returned.
func (p *Pool) Wait() { p.wg.Wait() }
