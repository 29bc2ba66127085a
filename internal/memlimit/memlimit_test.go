package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestLimitReadsCgroupV2AndV1(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		want                int64
		err                 string
	}{
		{name: "v2 limit", file: "memory.max", content: "268435456\n", want: 256 << 20},
		{name: "v2 no limit", file: "memory.max", content: "max\n"},
		{name: "v1 limit", file: "memory/memory.limit_in_bytes", content: "268435456\n", want: 256 << 20},
		{name: "v1 no limit", file: "memory/memory.limit_in_bytes", content: "9223372036854771712\n"},
		{name: "no cgroup files"},
		{name: "garbage", file: "memory.max", content: "lots\n", err: "not a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.file != "" {
				p := filepath.Join(root, tc.file)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Limit(root)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Limit = %d, %v; want an error saying %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Limit = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestSetGivesTheRuntimeItsShareOfTheLimit: with a limit and no GOMEMLIMIT, Set
// sets the runtime's soft limit to 85 % of it; GOMEMLIMIT and no limit
// leave the runtime alone.
func TestSetGivesTheRuntimeItsShareOfTheLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "memory.max"), []byte("268435456\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Setenv("GOMEMLIMIT", "")
	os.Unsetenv("GOMEMLIMIT")
	soft, hard, err := Set(root)
	if err != nil || hard != 256<<20 || soft != int64(math.Floor(256<<20*Ratio)) {
		t.Fatalf("Set = %d, %d, %v", soft, hard, err)
	}
	if got := debug.SetMemoryLimit(-1); got != soft {
		t.Errorf("runtime limit %d, want %d", got, soft)
	}

	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "100MiB")
	if soft, hard, err := Set(root); soft != 0 || hard != 0 || err != nil {
		t.Errorf("with GOMEMLIMIT: Set = %d, %d, %v; want nothing set", soft, hard, err)
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT: runtime limit changed to %d", got)
	}

	os.Unsetenv("GOMEMLIMIT")
	if soft, hard, err := Set(t.TempDir()); soft != 0 || hard != 0 || err != nil {
		t.Errorf("no cgroup limit: Set = %d, %d, %v; want nothing set", soft, hard, err)
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("no cgroup limit: runtime limit changed to %d", got)
	}
}
