package jvmtest

import (
	"net"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestAStaleAttachSocketIsNotAListenerStarted: a socket file older than the
// process with its pid (left by an earlier process) does not count; one
// created after the process started does. The process is this test binary;
// the files are made the way a JVM makes them (a unix socket) and dated.
func TestAStaleAttachSocketIsNotAListenerStarted(t *testing.T) {
	pid := os.Getpid()
	path := "/tmp/.java_pid" + strconv.Itoa(pid)
	if _, err := os.Lstat(path); err == nil {
		t.Skipf("%s exists already; not touching it", path)
	}
	if AttachListenerStarted(pid) {
		t.Fatal("no socket, yet a listener is reported")
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); os.Remove(path) })
	if !AttachListenerStarted(pid) {
		t.Error("a socket made after the process started is not reported")
	}
	start, err := processStart(pid)
	if err != nil {
		t.Fatal(err)
	}
	if age := time.Since(start); age < 0 || age > time.Hour {
		t.Fatalf("process start %s is %s ago: implausible", start, age)
	}
	old := start.Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if AttachListenerStarted(pid) {
		t.Error("a socket older than the process (a stale one of an earlier process with this pid) is reported")
	}
}
