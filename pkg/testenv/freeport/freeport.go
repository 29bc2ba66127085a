// Package freeport hands out loopback TCP ports for tests and test
// environments to listen on.
//
// Asking the kernel for port 0 and closing the listener is the usual trick,
// but it returns a port from the ephemeral range, the same range outgoing
// connections take their local port from. On a busy test machine (API
// servers, kubelets and clients all dialling each other over loopback) an
// outgoing connection can take that port between the probe and the real
// bind. Ports from this package lie outside the ephemeral range, so only
// another listener can collide.
//
// Nor do two test processes collide (go test runs packages in parallel, each
// its own binary): a handed-out port is reserved across processes with an
// open-file-description lock on one byte, at the port's offset, of a lock
// file in the temporary directory owned by the user. Another process skips a
// reserved port; the kernel drops the reservation when Release is called or
// the process exits, however it exits. One process never hands out the same
// port twice until it is released.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// rangeFile holds the kernel's ephemeral port range ("low high").
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// handedOut remembers ports given out by this process and not released.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Loopback returns a TCP port that nothing listens on at 127.0.0.1 right
// now, outside the ephemeral port range, and not handed out (and not
// released) before, by this process or by another process of the same user
// that uses this package. The caller should bind it soon: the port is probed
// and reserved among users of this package, not held against other programs.
func Loopback() (int, error) {
	lo, hi := window(ephemeralRange())
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 200 {
		port := lo + rand.IntN(hi-lo+1)
		if handedOut.ports[port] || !reserve(port) {
			continue
		}
		if !available(port) {
			unreserve(port)
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
		if handedOut.ports[p] {
			unreserve(p)
		}
		delete(handedOut.ports, p)
	}
}

// lockFile is the file whose byte at offset port reserves port across
// processes. It is opened once; a nil file (it could not be opened safely)
// leaves reservations to this process alone.
var lockFile = struct {
	once sync.Once
	f    *os.File
}{}

// lockFilePath is the reservation file of the current user.
func lockFilePath() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("handlerkit-freeport-%d.lock", os.Getuid()))
}

// openLockFile opens the reservation file, refusing a symlink and a file
// owned by another user: the temporary directory is shared, and a file
// another user controls must not steer which ports are handed out.
func openLockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if int(st.Uid) != os.Getuid() || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("freeport: %s is not a regular file of uid %d", path, os.Getuid())
	}
	return f, nil
}

// lockFD returns the reservation file's descriptor, or -1 without one.
func lockFD() int {
	lockFile.once.Do(func() {
		if f, err := openLockFile(lockFilePath()); err == nil {
			lockFile.f = f
		}
	})
	if lockFile.f == nil {
		return -1
	}
	return int(lockFile.f.Fd())
}

// reserve takes the cross-process reservation of port, reporting false when
// another process holds it. Without a reservation file it reserves nothing
// and reports true: the bind probe alone then guards the port.
func reserve(port int) bool {
	fd := lockFD()
	if fd < 0 {
		return true
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(port), Len: 1}
	return unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk) == nil
}

// unreserve drops this process's cross-process reservation of port.
func unreserve(port int) {
	fd := lockFD()
	if fd < 0 {
		return
	}
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0, Start: int64(port), Len: 1}
	_ = unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk)
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
