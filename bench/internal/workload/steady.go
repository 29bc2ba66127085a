package workload

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/handlerkit/handlerkit/bench/internal/probe"
)

// SteadyResult says how the steady update load went.
type SteadyResult struct {
	Sent    int           // updates sent
	Skipped int           // ticks dropped because too many updates were in flight
	Elapsed time.Duration // from the first tick to the last reply
}

// SteadyUpdates updates exporters of ns round-robin at rate updates per
// second for d: each update changes spec.port (bumping the generation) and
// stamps the send time in probe.StampAnnotation. An update is sent on every
// tick whether or not the previous ones have returned, up to maxInFlight.
func (w Writer) SteadyUpdates(ctx context.Context, ns string, n, rate int, d time.Duration) (SteadyResult, error) {
	return w.steady(ctx, n, rate, d, func(ctx context.Context, i int, now int64) error {
		name := ExporterName(i % n)
		// A port derived from the clock changes the spec (and the
		// generation) on every update, in every session.
		port := 1024 + (now/1000)%64000
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}},"spec":{"port":%d}}`, probe.StampAnnotation, strconv.FormatInt(now, 10), port)
		_, err := w.JMX.JmxV1alpha1().PrometheusJmxExporters(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "bench-writer"})
		if err != nil {
			return fmt.Errorf("workload: steady update of %s: %w", name, err)
		}
		return nil
	})
}

// SteadyPodUpdates updates Pods of ns round-robin at rate updates per
// second for d, as SteadyUpdates does exporters: each update stamps the
// send time in probe.StampAnnotation (a Pod's spec is mostly immutable, so
// only its metadata changes, as when a controller labels or annotates it).
func (w Writer) SteadyPodUpdates(ctx context.Context, ns string, n, rate int, d time.Duration) (SteadyResult, error) {
	return w.steady(ctx, n, rate, d, func(ctx context.Context, i int, now int64) error {
		name := PodName(i % n)
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, probe.StampAnnotation, strconv.FormatInt(now, 10))
		_, err := w.Kube.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "bench-writer"})
		if err != nil {
			return fmt.Errorf("workload: steady update of pod %s: %w", name, err)
		}
		return nil
	})
}

// steady calls update(i, now) for i = 0, 1, ... at rate per second for d:
// on every tick whether or not the previous ones have returned, up to
// maxInFlight.
func (w Writer) steady(ctx context.Context, n, rate int, d time.Duration, update func(ctx context.Context, i int, now int64) error) (SteadyResult, error) {
	const maxInFlight = 256
	var (
		res      SteadyResult
		wg       sync.WaitGroup
		firstErr atomic.Pointer[error]
		sem      = make(chan struct{}, maxInFlight)
	)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	start := time.Now()
	for i := 0; time.Since(start) < d; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return res, ctx.Err()
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			res.Skipped++
			continue
		}
		res.Sent++
		wg.Go(func() {
			defer func() { <-sem }()
			if err := update(ctx, i, time.Now().UnixNano()); err != nil {
				firstErr.CompareAndSwap(nil, &err)
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	if p := firstErr.Load(); p != nil {
		return res, *p
	}
	return res, nil
}
