package freeport

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestLoopbackPortsAreOutsideTheEphemeralRangeBindableAndDistinct(t *testing.T) {
	lo, hi := window(ephemeralRange())
	seen := map[int]bool{}
	var ports []int
	for range 100 {
		p, err := Loopback()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		ports = append(ports, p)
		if p < lo || p > hi {
			t.Errorf("port %d lies outside the window %d-%d", p, lo, hi)
		}
	}
	Release(ports...)
	for _, p := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("binding handed-out port %d: %v", p, err)
		}
		l.Close()
	}
}

func TestAvailableIsFalseForAListeningPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if available(port) {
		t.Errorf("available(%d) = true while something listens on it", port)
	}
	l.Close()
	if !available(port) {
		t.Errorf("available(%d) = false after the listener closed", port)
	}
}

func TestWindowKeepsOutOfTheEphemeralRange(t *testing.T) {
	cases := []struct {
		elo, ehi, lo, hi int
	}{
		{32768, 60999, 1024, 32767},  // Linux default: below is wider
		{10000, 20000, 20001, 65535}, // above is wider
		{1024, 65535, 1024, 65535},   // nothing outside: anything goes
		{1025, 65535, 1024, 65535},
	}
	for _, c := range cases {
		if lo, hi := window(c.elo, c.ehi); lo != c.lo || hi != c.hi {
			t.Errorf("window(%d, %d) = %d-%d, want %d-%d", c.elo, c.ehi, lo, hi, c.lo, c.hi)
		}
	}
}

func TestParseRange(t *testing.T) {
	cases := []struct {
		in     string
		lo, hi int
	}{
		{"32768\t60999\n", 32768, 60999},
		{"1024 65535", 1024, 65535},
		{"garbage", 32768, 60999},
		{"70000 80000", 32768, 60999},
		{"5 4", 32768, 60999},
	}
	for _, c := range cases {
		if lo, hi := parseRange(c.in); lo != c.lo || hi != c.hi {
			t.Errorf("parseRange(%q) = %d %d, want %d %d", c.in, lo, hi, c.lo, c.hi)
		}
	}
}

// childEnv makes the test binary, re-executed, reserve the port it names,
// print whether it could, and hold the port until its standard input closes.
const childEnv = "FREEPORT_TEST_RESERVE"

func TestMain(m *testing.M) {
	if p := os.Getenv(childEnv); p != "" {
		port, err := strconv.Atoi(p)
		if err != nil || !reserve(port) {
			fmt.Println("refused")
			os.Exit(0)
		}
		fmt.Println("reserved")
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// reservingChild is a re-executed test binary that tried to reserve a port.
type reservingChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// answer is the child's first line: "reserved" or "refused".
	answer string
}

// startReservingChild starts a child that tries to reserve port and waits
// for its answer. The child holds a reservation it got until exit is called.
func startReservingChild(t *testing.T, port int) *reservingChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(port))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &reservingChild{cmd: cmd, stdin: stdin}
	t.Cleanup(func() { c.exit() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the child's answer: %v", err)
	}
	c.answer = strings.TrimSpace(line)
	return c
}

// exit makes the child exit and waits for it.
func (c *reservingChild) exit() {
	c.stdin.Close()
	_ = c.cmd.Wait()
}

func TestAPortReservedByAnotherProcessIsNotHandedOut(t *testing.T) {
	if lockFD() < 0 {
		t.Fatalf("the reservation file %s cannot be opened", lockFilePath())
	}
	port, err := Loopback()
	if err != nil {
		t.Fatal(err)
	}
	// Handed out here: another process cannot reserve it.
	if c := startReservingChild(t, port); c.answer != "refused" {
		t.Fatalf("another process answered %q for port %d, which this process holds; want refused", c.answer, port)
	}
	// Released here: another process can, and while it holds it this one cannot.
	Release(port)
	c := startReservingChild(t, port)
	if c.answer != "reserved" {
		t.Fatalf("another process answered %q for released port %d; want reserved", c.answer, port)
	}
	if reserve(port) {
		t.Fatalf("this process reserved port %d, which another process holds", port)
	}
	// The child's exit drops its reservation without any cleanup of its own.
	c.exit()
	if !reserve(port) {
		t.Fatalf("port %d still reserved after the process holding it exited", port)
	}
	unreserve(port)
}

func TestLockFileOfAnotherKindIsRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if f, err := openLockFile(link); err == nil {
		f.Close()
		t.Errorf("openLockFile followed a symlink")
	}
	if f, err := openLockFile(dir); err == nil {
		f.Close()
		t.Errorf("openLockFile opened a directory")
	}
	f, err := openLockFile(target)
	if err != nil {
		t.Fatalf("openLockFile of a regular file of this user: %v", err)
	}
	f.Close()
}
