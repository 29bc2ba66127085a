package jvm

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// benchJVMs is how many JVMs one benchmark iteration injects.
const benchJVMs = 20

// BenchmarkInjectToFirstScrape measures, per JVM, the time from calling Inject to the first successful scrape of
// the agent's /metrics, over 20 JVMs, and reports the p50 and p99. Run it with -benchtime=1x: each iteration
// starts 20 JVMs.
func BenchmarkInjectToFirstScrape(b *testing.B) {
	needJava(b)
	in, err := NewInjector(WithMinAge(0), WithHTTPTimeout(0), WithTargetDir(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	var all []time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		jvms := startJVMs(b, benchJVMs)
		b.StartTimer()
		for _, jv := range jvms {
			port := freePort(b)
			start := time.Now()
			res := in.Inject(context.Background(), jv.Pid, loopbackAgent(port))
			if res.Status != OutcomeOK {
				b.Fatalf("inject: %+v", res)
			}
			if err := waitFirstScrape(jv.Pid, port); err != nil {
				b.Fatal(err)
			}
			all = append(all, time.Since(start))
		}
		b.StopTimer()
		for _, jv := range jvms {
			_ = jv.Stop()
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(percentile(all, 50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(all, 99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op") // a per-op time mixes 20 injections; the percentiles are the result
}

func startJVMs(b *testing.B, n int) []*jvmtest.JVM {
	out := make([]*jvmtest.JVM, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			j, err := jvmtest.Start(context.Background(), jvmtest.Options{App: testApp})
			if err != nil {
				b.Error(err)
				return
			}
			out[i] = j
		}()
	}
	wg.Wait()
	if b.Failed() {
		for _, j := range out {
			if j != nil {
				_ = j.Stop()
			}
		}
		b.FailNow()
	}
	return out
}

func waitFirstScrape(pid, port int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		body, err := Scrape(ctx, pid, "127.0.0.1", port)
		if err == nil && heapMetric.MatchString(body) {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// percentile returns the nearest-rank p-th percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}
