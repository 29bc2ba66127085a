// Package memlimit gives a Go program in a container a soft memory limit
// under the container's hard one, so that its garbage collector works
// harder as the heap nears the limit instead of the kernel killing it.
package memlimit

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// Ratio is the share of the container's memory limit that Set gives the Go
// runtime. The rest is for what the runtime's limit does not count: the
// pages of the program itself (29 MiB of the operator's resident set
// in the scale benchmark, which peaked at 254 MiB with a soft limit of
// 230 MiB, 90 % of 256 MiB) and the collector's lag behind a burst.
const Ratio = 0.85

// unlimited is the least value cgroup v1 reports for "no limit" (the
// largest multiple of the page size below 2^63).
const unlimited = 1 << 62

// Limit reads the memory limit of the cgroup mounted at root (normally
// /sys/fs/cgroup): cgroup v2's memory.max, else v1's
// memory/memory.limit_in_bytes. It returns 0 when there is no limit.
func Limit(root string) (int64, error) {
	for _, f := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("memlimit: %s: %q is not a number of bytes", filepath.Join(root, f), s)
		}
		if n <= 0 || n >= unlimited {
			return 0, nil
		}
		return n, nil
	}
	return 0, nil
}

// Set sets Go's soft memory limit (debug.SetMemoryLimit) to Ratio of the
// limit of the cgroup at root, unless GOMEMLIMIT is set (the runtime has
// applied it) or there is no limit. It returns the limit it set and the
// cgroup's, 0 and 0 when it set none.
func Set(root string) (soft, hard int64, err error) {
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok && v != "" {
		return 0, 0, nil
	}
	hard, err = Limit(root)
	if err != nil || hard == 0 {
		return 0, 0, err
	}
	soft = int64(math.Floor(float64(hard) * Ratio))
	debug.SetMemoryLimit(soft)
	return soft, hard, nil
}
