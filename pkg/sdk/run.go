package sdk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/handlerkit/handlerkit/pkg/metrics"
)

// Run serves metrics and probes, waits for leadership when an Elector is
// set, starts every watch, waits for their caches to sync and handles events
// until ctx ends.
//
// Handling ends when ctx ends, when leadership is lost, or when a watch
// fails. Then, in this order: the handlers' context is cancelled at once and
// no new handling starts; Run waits for running handlers up to the graceful
// timeout; the informers stop and reads through query go to the API server
// again; the Elector releases leadership; the metrics server stops. Run
// returns nil after ctx ended, an error wrapping ErrLeadershipLost when
// leadership ended first, and other errors for failures; it never panics.
// When Run returns, this replica holds no lease or lock.
func (o *Operator) Run(ctx context.Context) error {
	o.mu.Lock()
	if o.running {
		o.mu.Unlock()
		return errors.New("sdk: Run is already running")
	}
	watches, handler := slices.Clone(o.watches), o.handler
	if err := validate(watches, handler); err != nil {
		o.mu.Unlock()
		return err
	}
	o.running = true
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.running, o.state, o.addr = false, stateIdle, ""
		o.mu.Unlock()
	}()

	stopServer, err := o.startServer()
	if err != nil {
		return err
	}
	// Deferred first, so it runs last: probes answer until the very end.
	defer stopServer()
	// Events recorded until the handlers have returned are still written.
	defer o.events.start()()

	leadCtx := ctx
	if e := o.cfg.elector; e != nil {
		o.setState(stateStandby)
		o.cfg.log.Info("waiting for leadership")
		// Release runs after lead has drained the handlers (defers run
		// after the return value is computed), whatever Lead returned.
		defer o.release(e)
		lc, err := e.Lead(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("sdk: leader election: %w", err)
		}
		if lc == nil {
			return errors.New("sdk: leader election: Elector returned a nil context")
		}
		// End the term on either context, whatever the Elector derived its
		// context from.
		var cancel context.CancelFunc
		leadCtx, cancel = context.WithCancel(lc)
		defer cancel()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		o.cfg.log.Info("leading")
	}
	o.setState(stateLeading)
	if err := o.lead(leadCtx, watches, handler); err != nil {
		return err
	}
	if ctx.Err() == nil {
		return fmt.Errorf("sdk: %w", ErrLeadershipLost)
	}
	return nil
}

// release gives up leadership once handling has stopped.
func (o *Operator) release(e Elector) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := e.Release(ctx); err != nil {
		o.cfg.log.WithError(err).Error("could not release leadership; a stand-by takes over once it expires")
		return
	}
	o.cfg.log.Info("released leadership")
}

// Healthy reports the Operator's health for /healthz: the Elector's own
// health when one is set, else nil.
func (o *Operator) Healthy() error {
	if o.cfg.elector == nil {
		return nil
	}
	if err := o.cfg.elector.Healthy(); err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	return nil
}

func validate(watches []*watch, handler Handler) error {
	if len(watches) == 0 {
		return errors.New("sdk: nothing to run: call Watch before Run")
	}
	for _, w := range watches {
		switch {
		case !w.cfg.secondary():
			if w.cfg.handler == nil && handler == nil {
				return fmt.Errorf("sdk: watch %q has no handler: call Handle or use WithHandler", w.name)
			}
		case w.cfg.ownerOf != nil && len(targetsOf(watches, w)) == 0:
			return fmt.Errorf("sdk: watch %q: WithOwnerOf(%s): no watch on that kind; add one with Watch",
				w.name, w.cfg.ownerOf.GroupKind())
		case w.cfg.mapFn != nil && len(targetsOf(watches, w)) == 0:
			return fmt.Errorf("sdk: watch %q: WithMapTo(%q): no watch of that name with a handler of its own",
				w.name, w.cfg.mapTo)
		}
	}
	return nil
}

// targetsOf returns the watches a secondary watch enqueues keys on: every
// primary watch of the owner kind, or the mapped target.
func targetsOf(watches []*watch, w *watch) []*watch {
	var out []*watch
	for _, t := range watches {
		if t.cfg.secondary() {
			continue
		}
		switch {
		case w.cfg.ownerOf != nil && t.gvk.GroupKind() == w.cfg.ownerOf.GroupKind():
			out = append(out, t)
		case w.cfg.mapFn != nil && t.name == w.cfg.mapTo:
			out = append(out, t)
		}
	}
	return out
}

func (o *Operator) setState(s runState) {
	o.mu.Lock()
	o.state = s
	o.mu.Unlock()
}

// startServer binds the metrics server synchronously and serves it in the
// background; the returned func stops it and waits.
func (o *Operator) startServer() (func(), error) {
	if o.cfg.metricsAddr == "0" {
		return func() {}, nil
	}
	srv := metrics.NewServer(o.cfg.metricsAddr,
		metrics.WithGatherer(o.cfg.gatherer),
		metrics.WithReadyCheck(o.Ready),
		metrics.WithHealthCheck(o.Healthy),
	)
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("sdk: metrics server: %w", err)
	}
	o.mu.Lock()
	o.addr = srv.Addr()
	o.mu.Unlock()
	o.cfg.log.WithField("addr", srv.Addr()).Info("serving metrics and probes")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx); err != nil {
			o.cfg.log.WithError(err).Error("metrics server stopped")
		}
	}()
	return func() { cancel(); <-done }, nil
}

// lead runs the watches for one leadership term and tears them down when
// ctx ends or a watch fails.
func (o *Operator) lead(ctx context.Context, watches []*watch, handler Handler) (err error) {
	// The term's one context: the handlers get it, so the end of the term
	// (ctx, or a failing watch) cancels them at once.
	termCtx, endTerm := context.WithCancel(ctx)
	defer endTerm()
	informers := newInformerSet(o)

	runs := make([]*watchRun, len(watches))
	for i, w := range watches {
		h := w.cfg.handler
		if h == nil {
			h = handler
		}
		var targets []*watch
		if w.cfg.secondary() {
			targets = targetsOf(watches, w)
		}
		runs[i] = w.newRun(termCtx, h, targets)
	}

	var (
		workers  sync.WaitGroup
		starters sync.WaitGroup
		fatal    = make(chan error, len(runs))
	)
	defer func() {
		o.setState(stateStopping)
		endTerm()
		starters.Wait()
		for _, r := range runs {
			r.queue.ShutDown()
		}
		o.drain(&workers)
		// From here on the caches go stale: query reads the API server.
		o.informers.Store(nil)
		for _, r := range runs {
			r.w.endRun(r)
		}
		informers.shutdown()
	}()

	type pending struct {
		run *watchRun
		err error
	}
	var (
		initial []*watchRun
		late    []pending
	)
	for _, r := range runs {
		switch err := r.resolve(); {
		case err == nil:
			initial = append(initial, r)
		case isPermanent(err):
			return err
		default:
			// A kind not served yet, or an API server that is not
			// reachable yet: retry in the background.
			late = append(late, pending{r, err})
		}
	}
	o.informers.Store(informers)
	for _, r := range initial {
		if err := r.start(informers); err != nil {
			return err
		}
	}
	// All at once, after every watch has added its handler and indexes.
	informers.start()
	for _, r := range initial {
		if err := o.waitSynced(termCtx, r); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	for _, r := range initial {
		o.startWorkers(termCtx, r, &workers)
	}
	for _, p := range late {
		starters.Add(1)
		go func() {
			defer starters.Done()
			if err := o.startLate(termCtx, p.run, p.err, informers, &workers); err != nil {
				fatal <- err
			}
		}()
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-fatal:
		return err
	}
}

// startLate waits until the watched kind can be resolved, then starts its
// watch. The kind may not be served yet (typically a CRD not installed yet),
// or the API server may not be reachable yet; both are retried with capped
// exponential backoff, with a log line for each attempt.
func (o *Operator) startLate(ctx context.Context, r *watchRun, err error, informers *informerSet, workers *sync.WaitGroup) error {
	log := o.cfg.log.WithField("watch", r.w.name).WithField("kind", r.w.gvk.String())
	delay := o.cfg.discoveryMin
	for {
		entry := log.WithField("retry_in", delay)
		if meta.IsNoMatchError(err) {
			entry.Warn("kind is not served by the API server yet (is its CRD installed?); retrying discovery")
		} else {
			entry.WithError(err).Warn("cannot resolve the kind through API discovery (is the API server reachable?); retrying")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		err = r.resolve()
		if err == nil {
			break
		}
		if isPermanent(err) {
			return err
		}
		delay = min(2*delay, o.cfg.discoveryMax)
	}
	log.Info("kind is served now; starting watch")
	if err := r.start(informers); err != nil {
		return err
	}
	informers.start()
	if err := o.waitSynced(ctx, r); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	o.startWorkers(ctx, r, workers)
	return nil
}

func (o *Operator) waitSynced(ctx context.Context, r *watchRun) error {
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, o.cfg.syncTimeout, true,
		func(context.Context) (bool, error) { return r.hasSynced(), nil })
	if err != nil {
		return fmt.Errorf("sdk: watch %q: cache did not sync within %s: %w", r.w.name, o.cfg.syncTimeout, err)
	}
	r.synced.Store(true)
	return nil
}

func (o *Operator) startWorkers(ctx context.Context, r *watchRun, workers *sync.WaitGroup) {
	if r.w.cfg.secondary() {
		// Secondary watches only feed their targets' queues.
		return
	}
	for range r.w.cfg.workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			r.work(ctx)
		}()
	}
}

// drain waits for the workers, whose context is already cancelled, up to
// the graceful timeout. A handler that ignores its context is left behind,
// and said so: leadership is released while it still runs.
func (o *Operator) drain(workers *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { workers.Wait(); close(done) }()
	timer := time.NewTimer(o.cfg.gracefulTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		o.cfg.log.WithField("timeout", o.cfg.gracefulTimeout).Error(
			"handlers still running after the graceful timeout although their context is cancelled; " +
				"stopping anyway: leadership is released and a stand-by may lead while they run")
	}
}
