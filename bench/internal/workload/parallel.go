package workload

import (
	"context"
	"sync"
	"sync/atomic"
)

// ForEach calls f for 0..n-1 from parallel goroutines and returns the first
// error; the first error also cancels the context the other calls get.
func ForEach(ctx context.Context, n, parallel int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}
