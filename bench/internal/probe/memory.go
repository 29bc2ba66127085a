package probe

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Memory is what one process holds.
type Memory struct {
	// HeapInuse is runtime.MemStats.HeapInuse after a full collection: the
	// bytes in heap spans holding live objects.
	HeapInuse uint64 `json:"heapInuse"`
	// HeapAlloc is the bytes of live heap objects after that collection.
	HeapAlloc uint64 `json:"heapAlloc"`
	// RSS is VmRSS from /proc/self/status after the collection and after
	// returning free memory to the OS.
	RSS uint64 `json:"rss"`
	// PeakRSS is VmHWM, the highest RSS the process ever had (the initial
	// list is usually the peak).
	PeakRSS uint64 `json:"peakRSS"`
	// CPUSeconds is the user and system CPU time the process used until
	// then (getrusage), before the collection ReadMemory forces: what
	// starting and syncing the cache cost.
	CPUSeconds float64 `json:"cpuSeconds"`
}

// ReadMemory collects garbage, returns free pages to the OS and reads the
// heap and RSS of the calling process.
func ReadMemory() (Memory, error) {
	var cpu float64
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := Memory{HeapInuse: ms.HeapInuse, HeapAlloc: ms.HeapAlloc, CPUSeconds: cpu}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return m, fmt.Errorf("probe: read RSS: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		key, value, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		switch key {
		case "VmRSS":
			m.RSS = kiB(value)
		case "VmHWM":
			m.PeakRSS = kiB(value)
		}
	}
	return m, s.Err()
}

// kiB parses "  1234 kB" into bytes.
func kiB(v string) uint64 {
	n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	return n * 1024
}
