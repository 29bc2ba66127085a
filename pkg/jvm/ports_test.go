package jvm

import (
	"context"
	"net"
	"os"
	"strconv"
	"testing"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// startInOrder starts JVMs one after the other, so that they are ordered by age as listed (the first is the
// oldest).
func startInOrder(t *testing.T, opts ...jvmtest.Options) []JVM {
	t.Helper()
	var out []JVM
	for _, o := range opts {
		jv := jvmtest.StartJVM(t, o)
		j, err := Inspect(jv.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) > 0 && j.StartTicks <= out[len(out)-1].StartTicks {
			t.Fatalf("JVM %d did not start after JVM %d", j.PID, out[len(out)-1].PID)
		}
		out = append(out, j)
	}
	return out
}

// TestSeveralJVMsInOneNetworkNamespaceGetTheirOwnPorts injects two JVMs that share this test's network
// namespace and one in a namespace of its own, all at once with one port: the oldest JVM of the shared
// namespace gets the port, the other the next free one (skipping one held by a listener), and the JVM in its own
// namespace the port too. Injecting again changes nothing.
func TestSeveralJVMsInOneNetworkNamespaceGetTheirOwnPorts(t *testing.T) {
	t.Parallel()
	needJava(t)
	for _, jdk := range testJDKs(t) {
		t.Run(jdk.name, func(t *testing.T) {
			t.Parallel()
			base := freePort(t)
			busy, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+1)))
			if err != nil {
				t.Skipf("port %d above the free port %d is taken: %v", base+1, base, err)
			}
			defer busy.Close()
			opts := jvmtest.Options{App: testApp, Java: jdk.java, JVMArgs: []string{"-Xmx64m"}}
			own := opts
			own.PrivateNamespaces, own.PrivateNetwork = true, true
			jvms := startInOrder(t, opts, opts, own)
			in := newTestInjector(t, WithTargetDir(DefaultTargetDir))
			results := in.InjectAll(context.Background(), jvms, loopbackAgent(base))
			for _, r := range results {
				if r.Status == OutcomeOK && r.NSPID != 1 {
					dir := agentDirOf(t, r, DefaultTargetDir)
					t.Cleanup(func() { os.RemoveAll(dir) })
				}
			}
			if len(results) != 3 {
				t.Fatalf("%d results for 3 JVMs", len(results))
			}
			for i, r := range results {
				requireOK(t, r)
				if r.PID != jvms[i].PID {
					t.Fatalf("result %d is for pid %d, want %d (the order of the JVMs)", i, r.PID, jvms[i].PID)
				}
			}
			older, younger, alone := results[0].Port, results[1].Port, results[2].Port
			if older != base || alone != base || younger <= base+1 {
				t.Fatalf("ports: older %d, younger %d, own namespace %d; want %d, the next free above %d, %d",
					older, younger, alone, base, base+1, base)
			}
			for i, r := range results {
				scrapeHeap(t, jvms[i].PID, r.Port)
			}
			again := in.InjectAll(context.Background(), jvms, loopbackAgent(base))
			for i, r := range again {
				if r.Status != OutcomeAlreadyInjected || r.Port != results[i].Port {
					t.Errorf("second InjectAll for pid %d: %+v, want %s on port %d", r.PID, r, OutcomeAlreadyInjected, results[i].Port)
				}
			}
		})
	}
}

// TestPortListIsGivenOldestFirst covers an explicit list of ports: the i-th oldest JVM of a namespace gets the
// i-th port, and a JVM beyond the list gets an error instead of a port someone may use.
func TestPortListIsGivenOldestFirst(t *testing.T) {
	t.Parallel()
	needJava(t)
	opts := jvmtest.Options{App: testApp, JVMArgs: []string{"-Xmx64m"}}
	jvms := startInOrder(t, opts, opts, opts)
	p1, p2 := freePort(t), freePort(t)
	// Listed youngest first, to see that the order is the JVMs' age and not the list's.
	plan := AssignPorts([]JVM{jvms[2], jvms[1], jvms[0]}, "127.0.0.1", []int{p1, p2})
	if plan[2].JVM.PID != jvms[0].PID || plan[2].Port != p1 || plan[1].Port != p2 {
		t.Fatalf("plan %+v: want the oldest on %d and the next on %d", plan, p1, p2)
	}
	if ReasonOf(plan[0].Err) != ReasonInvalidRequest || plan[0].Port != 0 {
		t.Fatalf("the third JVM: %+v, want %s", plan[0], ReasonInvalidRequest)
	}
}
