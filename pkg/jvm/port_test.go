package jvm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// testJDK is a java launcher the tests of real JVMs run on.
type testJDK struct {
	name string
	java string
}

// testJDKs returns the JDKs every defect test runs on: the default java (17 on this project's machines) and the
// newest JDK of a later feature release under /usr/lib/jvm, when there is one.
func testJDKs(t *testing.T) []testJDK {
	t.Helper()
	jdks := []testJDK{{name: "default", java: "java"}}
	if java, version := newestJDK(t, 18); java != "" {
		jdks = append(jdks, testJDK{name: "jdk" + strings.SplitN(version, ".", 2)[0], java: java})
	}
	return jdks
}

// holdKind is how a test socket holds a port.
type holdKind string

const (
	// holdEstablished: a connection (without SO_REUSEADDR) whose local port is the port.
	holdEstablished holdKind = "established"
	// holdEstablishedReuse: the same with SO_REUSEADDR, as an accepted connection of a closed Go listener has.
	holdEstablishedReuse holdKind = "established-reuse"
	// holdBound: a socket bound to the port and neither listening nor connected; /proc/net/tcp does not show it.
	holdBound holdKind = "bound"
	// holdBoundReuse: the same with SO_REUSEADDR.
	holdBoundReuse holdKind = "bound-reuse"
	// holdListening: a listener with SO_REUSEADDR.
	holdListening holdKind = "listening"
	// holdTimeWait: a closed connection from the port, in TIME_WAIT.
	holdTimeWait holdKind = "time-wait"
)

// holdPort creates, in the network namespace of pid, a socket of kind bound to addr:port, and closes it when
// the test ends. Only loopback addresses and the wildcard of a private namespace are used.
func holdPort(t *testing.T, pid int, kind holdKind, addr string, port int) {
	t.Helper()
	var closers []func()
	t.Cleanup(func() {
		for _, c := range closers {
			c()
		}
	})
	err := inNetns(pid, func() error {
		ip := net.ParseIP(addr)
		family, sa := sockaddr(ip, port)
		fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		// Closed at most once: closing a descriptor number twice can close one
		// that a parallel test has opened meanwhile.
		var closeOnce sync.Once
		closeFd := func() { closeOnce.Do(func() { unix.Close(fd) }) }
		closers = append(closers, closeFd)
		if kind == holdEstablishedReuse || kind == holdBoundReuse || kind == holdListening {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
				return err
			}
		}
		if err := unix.Bind(fd, sa); err != nil {
			return fmt.Errorf("bind %s: %w", net.JoinHostPort(addr, strconv.Itoa(port)), err)
		}
		switch kind {
		case holdListening:
			return unix.Listen(fd, 1)
		case holdEstablished, holdEstablishedReuse, holdTimeWait:
			peer := "127.0.0.1"
			if ip.To4() == nil {
				peer = "::1"
			}
			l, err := net.Listen("tcp", net.JoinHostPort(peer, "0"))
			if err != nil {
				return err
			}
			closers = append(closers, func() { l.Close() })
			_, remote := sockaddr(net.ParseIP(peer), l.Addr().(*net.TCPAddr).Port)
			if err := unix.Connect(fd, remote); err != nil {
				return fmt.Errorf("connect: %w", err)
			}
			if kind != holdTimeWait {
				return nil
			}
			// Close this end first, then the peer's: this end goes to TIME_WAIT.
			c, err := l.Accept()
			if err != nil {
				return err
			}
			closeFd()
			c.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("hold port %d (%s): %v", port, kind, err)
	}
	if kind == holdTimeWait {
		waitSocketState(t, pid, port, 6)
	}
}

// waitSocketState waits until /proc lists a socket with local port port in the TCP state.
func waitSocketState(t *testing.T, pid, port, state int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		socks, err := portSockets(pid, port)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range socks {
			if s.State == state {
				return
			}
		}
	}
	t.Fatalf("no socket on port %d reached TCP state %d", port, state)
}

func sockaddr(ip net.IP, port int) (int, unix.Sockaddr) {
	if ip4 := ip.To4(); ip4 != nil {
		sa := &unix.SockaddrInet4{Port: port}
		copy(sa.Addr[:], ip4)
		return unix.AF_INET, sa
	}
	sa := &unix.SockaddrInet6{Port: port}
	copy(sa.Addr[:], ip.To16())
	return unix.AF_INET6, sa
}

// portProbe is a JVM running testdata/portprobe/PortProbe.java in a network namespace of its own, which binds a
// server socket as jmx_exporter does and reports whether it could.
type portProbe struct {
	pid int
	in  io.Writer
	out *bufio.Reader
}

func startPortProbe(t *testing.T, java string) *portProbe {
	t.Helper()
	src, err := filepath.Abs("testdata/portprobe/PortProbe.java")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--net", "/bin/sh", "-c", `ip link set lo up && exec "$@"`, "sh", java, src)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	exited, err := startChild(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); <-exited })
	p := &portProbe{pid: cmd.Process.Pid, in: in, out: bufio.NewReader(out)}
	if line, err := p.out.ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("port probe did not start: %q %v", line, err)
	}
	return p
}

// bind asks the probe JVM to open and close a server socket on host:port ("" for no host) and returns nil or
// the JVM's failure.
func (p *portProbe) bind(t *testing.T, host string, port int) error {
	t.Helper()
	if host == "" {
		host = "-"
	}
	fmt.Fprintf(p.in, "%s %d\n", host, port)
	line, err := p.out.ReadString('\n')
	if err != nil {
		t.Fatalf("port probe: %v", err)
	}
	if line = strings.TrimSpace(line); line != "ok" {
		return errors.New(line)
	}
	return nil
}

// TestCheckPortAgreesWithTheJVMsOwnBind compares CheckPort with what a real JVM's server socket, opened as
// jmx_exporter opens it, makes of the same port, for each way a socket can hold a port and each kind of agent
// address. A check looser than the JVM kills the JVM; this one is never looser, and stricter only where the cheap
// /proc filter refuses a port some listener holds on another address.
// It runs in a network namespace of its own, so the wildcard binds reach nothing but its loopback, and so
// CheckPort takes the path that joins a foreign namespace.
func TestCheckPortAgreesWithTheJVMsOwnBind(t *testing.T) {
	t.Parallel()
	for _, jdk := range testJDKs(t) {
		t.Run(jdk.name, func(t *testing.T) {
			t.Parallel()
			probe := startPortProbe(t, jdk.java)
			port := 20000
			for _, holder := range []struct {
				kind holdKind
				addr string
			}{
				{"", ""},
				{holdEstablished, "127.0.0.1"},
				{holdEstablished, "::1"},
				{holdEstablishedReuse, "127.0.0.1"},
				{holdBound, "127.0.0.1"},
				{holdBound, "0.0.0.0"},
				{holdBound, "::"},
				{holdBoundReuse, "127.0.0.1"},
				{holdListening, "127.0.0.1"},
				{holdListening, "::1"},
				{holdTimeWait, "127.0.0.1"},
			} {
				for _, host := range []string{"127.0.0.1", "", "0.0.0.0", "::1", "::"} {
					port++
					if holder.kind != "" {
						holdPort(t, probe.pid, holder.kind, holder.addr, port)
					}
					name := fmt.Sprintf("held %s on %s, agent on %q", holder.kind, holder.addr, host)
					// CheckPort first: it closes its sockets at once, while the probe's HttpServer may keep its
					// port a little longer.
					ours := CheckPort(JVM{PID: probe.pid}, host, port)
					jvmErr := probe.bind(t, host, port)
					switch {
					case jvmErr != nil && ReasonOf(ours) != ReasonPortInUse:
						t.Errorf("%s: the JVM cannot bind (%v) but CheckPort says %v", name, jvmErr, ours)
					case jvmErr == nil && ours != nil && holder.kind == holdListening:
						// The cheap /proc filter refuses a port with any listener, whatever its address.
						t.Logf("%s: stricter than the JVM, which is safe: %v", name, ours)
					case jvmErr == nil && ours != nil:
						t.Errorf("%s: the JVM can bind but CheckPort refuses: %v", name, ours)
					default:
						t.Logf("%s: JVM %v, CheckPort %v", name, jvmErr, ours)
					}
				}
			}
		})
	}
}

// TestPortHeldWithoutListenerIsRefusedAndJVMLives covers the sockets /proc/net/tcp's listeners do not show: a
// connection whose local port is the agent's port, and a socket bound to it that does not listen. jmx_exporter
// cannot bind such a port and calls System.exit; Inject must refuse it with port-in-use and leave the JVM
// untouched, alive and still injectable on another port.
func TestPortHeldWithoutListenerIsRefusedAndJVMLives(t *testing.T) {
	t.Parallel()
	needJava(t)
	cases := []struct {
		kind    holdKind
		private bool
		host    string
	}{
		{holdEstablished, false, "127.0.0.1"},
		{holdBound, false, "127.0.0.1"},
		// The wildcard only in a network namespace of the JVM's own, which has nothing but loopback.
		{holdEstablished, true, ""},
		{holdBound, true, ""},
	}
	for _, jdk := range testJDKs(t) {
		for _, tc := range cases {
			name := fmt.Sprintf("%s/%s/host=%q", jdk.name, tc.kind, tc.host)
			if tc.private {
				name += "/own-netns"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp, Java: jdk.java, JVMArgs: []string{"-Xmx64m"},
					PrivateNamespaces: tc.private, PrivateNetwork: tc.private})
				port := freePort(t)
				holdPort(t, jv.Pid, tc.kind, "127.0.0.1", port)
				agent := Agent{Jar: testAgentJar, Config: testConfig, Port: port, Host: tc.host}
				dir := DefaultTargetDir // the JVM's own /tmp
				if !tc.private {
					dir = testTargetDir(t)
				}
				in := newTestInjector(t, WithTargetDir(dir))
				res := in.Inject(context.Background(), jv.Pid, agent)
				if res.Status != OutcomeError || res.Reason != ReasonPortInUse {
					t.Fatalf("inject: %+v, want %s", res, ReasonPortInUse)
				}
				t.Logf("refused: %s", res.Message)
				assertUntouched(t, jv)
				// Still alive and answering: the agent loads on a free port.
				agent.Port = freePort(t)
				requireOK(t, in.Inject(context.Background(), jv.Pid, agent))
				scrapeHeap(t, jv.Pid, agent.Port)
				if !jv.Alive() {
					t.Fatalf("JVM died: %s", jv.Output())
				}
			})
		}
	}
}

// TestPrivilegedPortOfUnprivilegedJVMIsRefused: a JVM without CAP_NET_BIND_SERVICE cannot bind a port below
// net.ipv4.ip_unprivileged_port_start, however free it is, and the agent would exit the JVM. jmx-attach, as
// root, could bind it, so its own bind alone would not notice.
func TestPrivilegedPortOfUnprivilegedJVMIsRefused(t *testing.T) {
	t.Parallel()
	needJava(t)
	data, err := os.ReadFile(unprivilegedPortStartFile)
	if err != nil {
		t.Fatal(err)
	}
	start, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || start < 2 {
		t.Skipf("net.ipv4.ip_unprivileged_port_start is %q: every port is unprivileged here", data)
	}
	port := privilegedFreePort(t, start)
	for _, jdk := range testJDKs(t) {
		t.Run(jdk.name, func(t *testing.T) {
			t.Parallel()
			jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp, Java: jdk.java, JVMArgs: []string{"-Xmx64m"},
				Credential: &syscall.Credential{Uid: nobody, Gid: nobody}})
			res := newTestInjector(t, WithTargetDir(testTargetDir(t))).Inject(context.Background(), jv.Pid, loopbackAgent(port))
			if res.Status != OutcomeError || res.Reason != ReasonPortNotPermitted {
				t.Fatalf("inject on port %d: %+v, want %s", port, res, ReasonPortNotPermitted)
			}
			assertUntouched(t, jv)
		})
	}
}

// privilegedFreePort returns a port below start that nothing uses on loopback now.
func privilegedFreePort(t *testing.T, start int) int {
	t.Helper()
	for p := start - 1; p > start/2; p-- {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free privileged port")
	return 0
}

func TestBindProbesMirrorTheJDKsServerSocket(t *testing.T) {
	cases := map[string][]string{
		"":          {"[::]:9404", "0.0.0.0:9404"},
		"0.0.0.0":   {"[::]:9404", "0.0.0.0:9404"},
		"::":        {"[::]:9404", "0.0.0.0:9404"},
		"127.0.0.1": {"[::ffff:127.0.0.1]:9404", "127.0.0.1:9404"},
		"::1":       {"[::1]:9404"},
	}
	for host, want := range cases {
		probes, err := bindProbes(host, 9404)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range probes {
			got = append(got, p.name)
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("host %q: probes %v, want %v", host, got, want)
		}
	}
	if _, err := bindProbes("localhost", 9404); ReasonOf(err) != ReasonInvalidRequest {
		t.Errorf("host name: %v, want %s", err, ReasonInvalidRequest)
	}
}
