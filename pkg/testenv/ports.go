package testenv

import (
	"fmt"
	"net"
	"sync"
)

// handedOut remembers the ports given to environments of this process, so two
// environments starting at once never get the same one between probe and bind.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePort returns a loopback TCP port nobody listens on right now.
func freePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("testenv: finding a free loopback port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("testenv: no free loopback port found")
}

// releasePorts makes ports available to later environments of this process.
func releasePorts(ports ...int) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for _, p := range ports {
		delete(handedOut.ports, p)
	}
}
