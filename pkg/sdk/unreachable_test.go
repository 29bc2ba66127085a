package sdk_test

import (
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/testenv/freeport"
)

// TestRunWaitsForAnUnreachableAPIServer starts Run while nothing listens at
// the API server's address. Run must neither return nor report ready; it
// logs why and retries, and it starts handling once the server answers.
func TestRunWaitsForAnUnreachableAPIServer(t *testing.T) {
	env := sdk.SharedEnv(t)
	// A loopback port nobody listens on: connections are refused until the
	// proxy below takes it. freeport hands out one outside the ephemeral
	// range, reserved against other test binaries: a port from
	// "127.0.0.1:0", closed at once, could be taken by an outgoing loopback
	// connection or another test's listener before the proxy binds it (then
	// the log says something else than "connection refused", or the proxy
	// cannot listen).
	port, err := freeport.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	cfg := env.Config()
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host = "https://" + addr
	logger, hook := logtest.NewNullLogger()
	logger.SetLevel(logrus.DebugLevel)
	f := newFixtureWithConfig(t, env, cfg, sdk.WithLogger(logger), sdk.WithDiscoveryBackoff(20*time.Millisecond, 100*time.Millisecond))
	rec := &recorder{}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	run := f.runAsync(t)

	if done, err := run.returned(time.Second); done {
		t.Fatalf("Run returned %v while the API server was unreachable; want it to keep retrying", err)
	}
	if err := f.op.Ready(); err == nil {
		t.Error("Ready() = nil while the API server is unreachable")
	}
	eventually(t, 10*time.Second, "a log line saying discovery is retried", func() bool {
		for _, e := range hook.AllEntries() {
			if strings.Contains(e.Message, "is the API server reachable?") && e.Data[logrus.ErrorKey] != nil {
				return strings.Contains(e.Data[logrus.ErrorKey].(error).Error(), "connection refused")
			}
		}
		return false
	})

	startProxy(t, addr, target.Host)
	f.createCM(t, "after-outage")
	eventually(t, 30*time.Second, "the configmap handled once the API server answers", func() bool {
		return len(rec.find("after-outage", nil)) == 1
	})
	eventually(t, 10*time.Second, "ready", func() bool { return f.op.Ready() == nil })
}

// startProxy forwards TCP connections from listen to target until the test
// ends.
func startProxy(t *testing.T, listen, target string) {
	t.Helper()
	var (
		l   net.Listener
		err error
	)
	// The port was free a moment ago; another process may hold it briefly
	// (a wait on the port, bounded by 50 tries 100 ms apart).
	for try := 0; try < 50; try++ {
		if l, err = net.Listen("tcp", listen); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			track(in)
			track(out)
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(out, in); out.Close() }()
			go func() { defer wg.Done(); io.Copy(in, out); in.Close() }()
		}
	}()
}
