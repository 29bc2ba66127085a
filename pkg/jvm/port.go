package jvm

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// unprivilegedPortStartFile holds the lowest port a process without CAP_NET_BIND_SERVICE may bind. It is per
// network namespace: read from a thread in the target's namespace, it gives the target's value.
const unprivilegedPortStartFile = "/proc/sys/net/ipv4/ip_unprivileged_port_start"

// maxHoldersInMessage bounds how many sockets a port-in-use message names, so that results stay short.
const maxHoldersInMessage = 2

// CheckPort checks, before anything is loaded, that an agent in JVM j will be able to open its server socket on
// host:port. jmx_exporter calls System.exit when it cannot, so a wrong answer here kills the application.
//
// Reading /proc/<pid>/net/tcp cannot answer the question: an established connection whose local port is the
// port, or a socket that is bound but not listening (which /proc does not list at all), makes the agent's bind
// fail too. So CheckPort asks the kernel: in the JVM's network namespace it binds and listens on the very
// addresses the JVM's server socket would use, with SO_REUSEADDR as the JDK sets it on Linux, and closes them
// again. With no host (or an unspecified one, which the JDK turns into the IPv6 wildcard) that is [::] as a
// dual-stack socket and 0.0.0.0; with an IPv4 host it is the host and its IPv4-mapped IPv6 form; with an IPv6
// host, the host. Each probe is at least as strict as the JVM's own bind, never looser. The /proc listing is
// still read first, as a cheap filter and to say who holds the port. It also refuses a port below the
// namespace's net.ipv4.ip_unprivileged_port_start when the JVM lacks CAP_NET_BIND_SERVICE.
//
// When the JVM is in this process's network namespace (jmx-attach in the JVM's pod) nothing is joined. When it
// is not, the probe runs on an OS thread that joins the JVM's namespace, which needs CAP_SYS_ADMIN; without it
// the port cannot be checked and CheckPort refuses with ReasonPortCheckFailed rather than guess.
//
// The errors are *AttachError with ReasonPortInUse, ReasonPortNotPermitted, ReasonInvalidRequest (host is not an
// address in the JVM's namespace) or ReasonPortCheckFailed. A port can still be taken between the check and the
// agent's bind; Inject checks again right before it loads the agent to keep that window short.
func CheckPort(j JVM, host string, port int) error {
	if port < 1 || port > 65535 {
		return &AttachError{Reason: ReasonInvalidRequest, Msg: fmt.Sprintf("port %d is out of range 1-65535", port)}
	}
	probes, err := bindProbes(host, port)
	if err != nil {
		return err
	}
	socks, err := portSockets(j.PID, port)
	if err != nil {
		return err
	}
	for _, s := range socks {
		if s.State == TCPListen {
			return portInUse(j.PID, port, socks)
		}
	}
	var res probeResult
	err = inNetns(j.PID, func() error {
		res = runProbes(probes)
		return nil
	})
	if err != nil {
		return &AttachError{Reason: ReasonPortCheckFailed, Msg: fmt.Sprintf(
			"cannot check port %d in the network namespace of pid %d; run jmx-attach in the JVM's pod", port, j.PID), Err: err}
	}
	if res.unprivilegedStart > 0 && port < res.unprivilegedStart {
		st, err := readStatus(j.PID)
		if err != nil {
			return &AttachError{Reason: ReasonProcessGone, Msg: "read status", Err: err}
		}
		if !st.HasCapability(capNetBindService) {
			return &AttachError{Reason: ReasonPortNotPermitted, Msg: fmt.Sprintf(
				"port %d is below net.ipv4.ip_unprivileged_port_start (%d) in the network namespace of pid %d, which lacks CAP_NET_BIND_SERVICE: the agent could not bind it",
				port, res.unprivilegedStart, j.PID)}
		}
	}
	if res.err == nil {
		return nil
	}
	switch {
	case errors.Is(res.err, unix.EADDRINUSE):
		// Read /proc again: the holder may have appeared since the first look.
		if again, err := portSockets(j.PID, port); err == nil {
			socks = again
		}
		return portInUse(j.PID, port, socks)
	case errors.Is(res.err, unix.EADDRNOTAVAIL), errors.Is(res.err, unix.EAFNOSUPPORT):
		return &AttachError{Reason: ReasonInvalidRequest, Msg: fmt.Sprintf(
			"host %s is not an address in the network namespace of pid %d: the agent could not bind it", host, j.PID), Err: res.err}
	case errors.Is(res.err, unix.EACCES):
		return &AttachError{Reason: ReasonPortCheckFailed, Msg: fmt.Sprintf(
			"port %d is privileged and jmx-attach lacks CAP_NET_BIND_SERVICE to check it", port), Err: res.err}
	}
	return &AttachError{Reason: ReasonPortCheckFailed, Msg: fmt.Sprintf("check port %d in the network namespace of pid %d", port, j.PID), Err: res.err}
}

// bindProbe is one address the JVM's server socket could be bound to.
type bindProbe struct {
	family int
	addr   unix.Sockaddr
	// name is the address as the JVM would print it.
	name string
	// ifIPv6 marks a probe that only applies when the namespace has IPv6, as the JDK then uses an IPv6 socket.
	ifIPv6 bool
}

// bindProbes returns the addresses to bind for an agent on host:port, as the JDK's server socket on Linux binds
// them: an IPv6 socket (IPV6_V6ONLY off) whenever IPv6 is available, the IPv4 wildcard turned into the IPv6
// one, an IPv4 address into its mapped form; an IPv4 socket otherwise (or with -Djava.net.preferIPv4Stack).
func bindProbes(host string, port int) ([]bindProbe, error) {
	var ip net.IP
	if host != "" {
		if ip = net.ParseIP(host); ip == nil {
			return nil, &AttachError{Reason: ReasonInvalidRequest, Msg: fmt.Sprintf("host %q is not an IP address", host)}
		}
	}
	p := strconv.Itoa(port)
	v6 := func(a net.IP, ifIPv6 bool) bindProbe {
		sa := &unix.SockaddrInet6{Port: port}
		copy(sa.Addr[:], a.To16())
		name := a.String()
		if a.To4() != nil && !a.IsUnspecified() {
			name = "::ffff:" + name // Go prints a mapped address in its IPv4 form
		}
		return bindProbe{family: unix.AF_INET6, addr: sa, name: net.JoinHostPort(name, p), ifIPv6: ifIPv6}
	}
	v4 := func(a net.IP) bindProbe {
		sa := &unix.SockaddrInet4{Port: port}
		copy(sa.Addr[:], a.To4())
		return bindProbe{family: unix.AF_INET, addr: sa, name: net.JoinHostPort(a.String(), p)}
	}
	switch {
	case ip == nil || ip.IsUnspecified():
		return []bindProbe{v6(net.IPv6unspecified, true), v4(net.IPv4zero)}, nil
	case ip.To4() != nil:
		return []bindProbe{v6(ip, true), v4(ip)}, nil
	default:
		return []bindProbe{v6(ip, false)}, nil
	}
}

// probeResult is what runProbes found in the target's network namespace.
type probeResult struct {
	// unprivilegedStart is net.ipv4.ip_unprivileged_port_start there; 0 when it could not be read.
	unprivilegedStart int
	// err is the first bind or listen failure, nil when every probe bound.
	err error
}

// runProbes runs in the target's network namespace: it reads the unprivileged port start and binds and listens
// on each probe's address, closing each socket at once.
func runProbes(probes []bindProbe) probeResult {
	var res probeResult
	if data, err := os.ReadFile(unprivilegedPortStartFile); err == nil {
		res.unprivilegedStart, _ = strconv.Atoi(strings.TrimSpace(string(data)))
	}
	for _, p := range probes {
		err := bindAndClose(p)
		if p.ifIPv6 && errors.Is(err, unix.EAFNOSUPPORT) {
			continue // no IPv6 here, so the JVM uses an IPv4 socket, probed too
		}
		if err != nil {
			res.err = fmt.Errorf("bind %s: %w", p.name, err)
			return res
		}
	}
	return res
}

// bindAndClose opens a TCP socket with SO_REUSEADDR, as the JDK's server sockets have on Linux, binds it to the
// probe's address and listens, then closes it. Listening matters: the kernel checks the port's users again when
// a socket starts listening.
func bindAndClose(p bindProbe) error {
	fd, err := unix.Socket(p.family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return err
	}
	if p.family == unix.AF_INET6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			return err
		}
	}
	if err := unix.Bind(fd, p.addr); err != nil {
		return err
	}
	return unix.Listen(fd, 1)
}

// portSockets returns the sockets in the network namespace of pid whose local port is port, in any state, from
// /proc/<pid>/net/tcp and tcp6.
func portSockets(pid, port int) ([]Socket, error) {
	var out []Socket
	for _, name := range []string{"tcp", "tcp6"} {
		socks, err := readNetTCP(pid, name)
		if err != nil {
			return nil, err
		}
		for _, s := range socks {
			if s.LocalPort == port {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// portInUse builds the port-in-use error, naming up to maxHoldersInMessage sockets that hold the port, listeners
// first. With none listed, the holder is a socket that is bound but not listening, which /proc does not show.
func portInUse(pid, port int, socks []Socket) error {
	msg := fmt.Sprintf("port %d is in use in the network namespace of pid %d", port, pid)
	var held []string
	for _, listening := range []bool{true, false} {
		for _, s := range socks {
			if (s.State == TCPListen) == listening && len(held) < maxHoldersInMessage {
				held = append(held, describeSocket(s))
			}
		}
	}
	switch {
	case len(held) > 0:
		msg += " (" + strings.Join(held, "; ") + ")"
		if len(socks) > len(held) {
			msg += fmt.Sprintf(" and %d more", len(socks)-len(held))
		}
	default:
		msg += " (by a socket that is bound but not listening, which /proc/net/tcp does not list)"
	}
	return &AttachError{Reason: ReasonPortInUse, Msg: msg}
}

// describeSocket renders s briefly: "ESTABLISHED 127.0.0.1:9404->127.0.0.1:40000 uid 0".
func describeSocket(s Socket) string {
	local := net.JoinHostPort(s.LocalIP.String(), strconv.Itoa(s.LocalPort))
	if s.State == TCPListen {
		return fmt.Sprintf("LISTEN %s uid %d", local, s.UID)
	}
	remote := net.JoinHostPort(s.RemoteIP.String(), strconv.Itoa(s.RemotePort))
	return fmt.Sprintf("%s %s->%s uid %d", s.StateName(), local, remote, s.UID)
}
