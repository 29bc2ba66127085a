// Package freeport hands out loopback TCP ports for tests and test
// environments to listen on.
//
// Asking the kernel for port 0 and closing the listener is the usual trick,
// but it returns a port from the ephemeral range, the same range outgoing
// connections take their local port from. On a busy test machine (API
// servers, kubelets and clients all dialling each other over loopback) an
// outgoing connection can take that port between the probe and the real
// bind. Ports from this package lie outside the ephemeral range, so only
// another listener can collide, and one process never hands out the same
// port twice until it is released.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// rangeFile holds the kernel's ephemeral port range ("low high").
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// handedOut remembers ports given out by this process and not released.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Loopback returns a TCP port that nothing listens on at 127.0.0.1 right
// now, outside the ephemeral port range, and not handed out before by this
// process (unless released). The caller should bind it soon: the port is
// only probed, not held.
func Loopback() (int, error) {
	lo, hi := window(ephemeralRange())
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 200 {
		port := lo + rand.IntN(hi-lo+1)
		if handedOut.ports[port] || !available(port) {
			continue
		}
		handedOut.ports[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("freeport: no free loopback port in %d-%d after 200 tries", lo, hi)
}

// Release makes ports available to later Loopback calls of this process.
func Release(ports ...int) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for _, p := range ports {
		delete(handedOut.ports, p)
	}
}

// available reports whether port can be bound on 127.0.0.1 right now.
func available(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// window returns the widest stretch of unprivileged ports outside the
// ephemeral range elo-ehi, below it or above it.
func window(elo, ehi int) (lo, hi int) {
	below, above := elo-1-1024, 65535-ehi
	if below >= above && below > 0 {
		return 1024, elo - 1
	}
	if above > 0 {
		return ehi + 1, 65535
	}
	// The ephemeral range covers everything; any unprivileged port will do.
	return 1024, 65535
}

// ephemeralRange reads the kernel's ephemeral range, falling back to
// Linux's default when it cannot be read.
func ephemeralRange() (lo, hi int) {
	data, err := os.ReadFile(rangeFile)
	if err != nil {
		return 32768, 60999
	}
	return parseRange(string(data))
}

// parseRange parses "low high", falling back to Linux's default.
func parseRange(s string) (lo, hi int) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 32768, 60999
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || lo < 1 || hi > 65535 || lo > hi {
		return 32768, 60999
	}
	return lo, hi
}
