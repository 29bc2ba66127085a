package jvm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
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

// BenchmarkStartToFirstScrape measures, per JVM, the time from starting the JVM to the first successful scrape
// of the project's agent (jvmtest.AgentJar, the one the image ships) injected with WithWait and no minimum age, the way
// `jmx-attach inject --min-age 0 --wait 60s` runs next to a starting container, over 20 JVMs started one after
// the other, and reports the p50 and p99. Run it with -benchtime=1x.
func BenchmarkStartToFirstScrape(b *testing.B) {
	needJava(b)
	jar := shippedAgentJar(b)
	cfg := filepath.Join(b.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(exporterConfigA), 0o644); err != nil {
		b.Fatal(err)
	}
	in, err := NewInjector(WithMinAge(0), WithWait(60*time.Second), WithHTTPTimeout(0), WithTargetDir(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	var all, injected []time.Duration
	for i := 0; i < b.N; i++ {
		for range benchJVMs {
			port := freePort(b)
			start := time.Now()
			pid, stop := startBareJVM(b)
			res := in.Inject(context.Background(), pid, Agent{Jar: jar, Config: cfg, Port: port, Host: "127.0.0.1"})
			if res.Status != OutcomeOK {
				stop()
				b.Fatalf("inject: %+v", res)
			}
			injected = append(injected, time.Since(start))
			err := waitScrape(pid, port, "jvm_memory_used_bytes")
			all = append(all, time.Since(start))
			stop()
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	sort.Slice(injected, func(i, j int) bool { return injected[i] < injected[j] })
	b.ReportMetric(float64(percentile(all, 50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(all, 99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(percentile(injected, 50).Microseconds())/1000, "inject-p50-ms")
	b.ReportMetric(0, "ns/op") // a per-op time mixes 20 JVMs; the percentiles are the result
}

// startBareJVM starts the sample application without waiting for it, and returns its pid and a function that
// kills it and removes what it left in /tmp.
func startBareJVM(b *testing.B) (int, func()) {
	work, err := os.MkdirTemp("", "jvm-bench-")
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("java", "-Xmx64m", "-cp", testApp.Jar, testApp.MainClass)
	cmd.Dir = work
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	exited, err := startChild(cmd)
	if err != nil {
		b.Fatal(err)
	}
	pid := cmd.Process.Pid
	return pid, func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-exited
		os.RemoveAll(work)
		for _, f := range []string{".java_pid" + itoa(pid), ".attach_pid" + itoa(pid), markerPrefix + itoa(pid) + ".json"} {
			_ = os.Remove(filepath.Join("/tmp", f))
		}
		m, _ := filepath.Glob("/tmp/hsperfdata_*/" + itoa(pid))
		locks, _ := filepath.Glob(filepath.Join("/tmp", markerPrefix+itoa(pid)+"-*"+lockSuffix))
		for _, f := range append(m, locks...) {
			_ = os.Remove(f)
		}
	}
}

// waitScrape scrapes the agent on loopback until the body contains want.
func waitScrape(pid, port int, want string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		body, err := Scrape(ctx, pid, "127.0.0.1", port)
		if err == nil && strings.Contains(body, want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("port %d: no %s: %v", port, want, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
