package freeport

import (
	"net"
	"strconv"
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
