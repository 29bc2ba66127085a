package leader_test

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// leaderGoroutines returns the stacks of goroutines running code of package leader (not its tests).
func leaderGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "handlerkit/pkg/leader.") && !strings.Contains(g, "pkg/leader/goroutine_test.go") &&
			!strings.Contains(g, "_test.go") {
			out = append(out, g)
		}
	}
	return out
}

func TestGoroutinesStopWithTheContext(t *testing.T) {
	ns := newNamespace(t)
	createPod(t, ns, "op-a", operatorLabels)
	createPod(t, ns, "op-b", operatorLabels)
	createPod(t, ns, "op-c", operatorLabels)
	createPod(t, ns, "op-d", operatorLabels)
	a := startReplica(t, "op-a", newForLife(t, ns, "op-a", nil))
	b := startReplica(t, "op-b", newForLife(t, ns, "op-b", nil))
	c := startReplica(t, "op-c", newLease(t, ns, "op-c", nil))
	d := startReplica(t, "op-d", newLease(t, ns, "op-d", nil))
	eventually(t, 30*time.Second, "one leader per mode", func() bool {
		return len(leaders([]*replica{a, b})) == 1 && len(leaders([]*replica{c, d})) == 1
	})
	eventually(t, 30*time.Second, "both leaders labelled", func() bool { return len(labelledPods(t, ns)) == 2 })
	if len(leaderGoroutines()) == 0 {
		t.Fatal("no goroutines of package leader found while leading; the check below would prove nothing")
	}
	for _, r := range []*replica{a, b, c, d} {
		r.cancel()
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(leaderGoroutines()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines of package leader still running 30s after cancel:\n%s", strings.Join(leaderGoroutines(), "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
