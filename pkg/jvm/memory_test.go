package jvm

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadMemoryLevelReadsV1AndV2 reads the accounting files of both cgroup versions as the kernel writes them.
func TestReadMemoryLevelReadsV1AndV2(t *testing.T) {
	for name, tc := range map[string]struct {
		files   map[string]string
		want    MemoryLevel
		ok      bool
		room    int64
		limited bool
	}{
		"v2 limited": {map[string]string{"memory.max": "268435456\n", "memory.current": "200000000\n",
			"memory.stat": "anon 100\nfile 5000\nactive_file 1000\ninactive_file 4000000\n"},
			MemoryLevel{Limit: 268435456, Usage: 200000000, InactiveFile: 4000000}, true, 268435456 - 196000000, true},
		"v2 unlimited": {map[string]string{"memory.max": "max\n", "memory.current": "5\n", "memory.stat": "inactive_file 1\n"},
			MemoryLevel{Usage: 5, InactiveFile: 1}, true, 0, false},
		"v1 limited": {map[string]string{"memory.limit_in_bytes": "104857600\n", "memory.usage_in_bytes": "90000000\n",
			"memory.stat": "cache 10\ninactive_file 7\ntotal_inactive_file 1000000\n"},
			MemoryLevel{Limit: 104857600, Usage: 90000000, InactiveFile: 1000000}, true, 104857600 - 89000000, true},
		"v1 unlimited": {map[string]string{"memory.limit_in_bytes": "9223372036854771712\n", "memory.usage_in_bytes": "1\n", "memory.stat": ""},
			MemoryLevel{Usage: 1}, true, 0, false},
		"no memory controller": {map[string]string{"cgroup.procs": "1\n"}, MemoryLevel{}, false, 0, false},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for f, data := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			got, ok, err := readMemoryLevel(fd)
			if err != nil || ok != tc.ok || got != tc.want {
				t.Fatalf("readMemoryLevel = %+v, %v, %v; want %+v, %v", got, ok, err, tc.want, tc.ok)
			}
			if room, limited := got.Room(); room != tc.room || limited != tc.limited {
				t.Fatalf("Room = %d, %v; want %d, %v", room, limited, tc.room, tc.limited)
			}
		})
	}
}

func TestCgroupRelMatchesOnlyItsOwnHierarchy(t *testing.T) {
	for _, tc := range []struct {
		cg, root, rel string
		ok            bool
	}{
		{"/kubepods/pod1/c1", "/", "kubepods/pod1/c1", true},
		{"/kubepods/pod1/c1", "/kubepods/pod1/c1", "", true},
		{"/kubepods/pod1/c1/sub", "/kubepods/pod1/c1", "sub", true},
		{"/kubepods/pod1/c10", "/kubepods/pod1/c1", "", false},
		{"/../c1", "/../c1", "", true},
		{"/../c1", "/", "", false},
	} {
		rel, ok := cgroupRel(tc.cg, tc.root)
		if rel != tc.rel || ok != tc.ok {
			t.Errorf("cgroupRel(%q, %q) = %q, %v", tc.cg, tc.root, rel, ok)
		}
	}
}

// TestInsufficientMemoryIsRefusedUntouched moves a JVM into a memory cgroup of its own, with a limit 64 MiB above
// its usage, as jmx-attach on the node sees it: asked for 1 GiB of room, the injection is refused with
// insufficient-memory and the figures, before any signal; with the default 40 MiB, the same JVM is injected.
func TestInsufficientMemoryIsRefusedUntouched(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv, _ := startInspected(t)
	levels, err := MemoryLevels(jv.Pid)
	if err != nil || len(levels) == 0 {
		t.Fatalf("the JVM's memory cgroup: %v %v", levels, err)
	}
	parent := levels[0].Path
	cg := filepath.Join(parent, "handlerkit-test-"+strconv.Itoa(jv.Pid))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(strconv.Itoa(jv.Pid)), 0o644)
		if err := os.Remove(cg); err != nil {
			t.Errorf("remove cgroup: %v", err)
		}
	})
	v1 := fileExists(filepath.Join(cg, "memory.limit_in_bytes"))
	limitFile := map[bool]string{true: "memory.limit_in_bytes", false: "memory.max"}[v1]
	if v1 {
		// Charge the JVM's memory to the new cgroup as it moves, as it would be in a container of its own.
		_ = os.WriteFile(filepath.Join(cg, "memory.move_charge_at_immigrate"), []byte("3"), 0o644)
	}
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(jv.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	levels, err = MemoryLevels(jv.Pid)
	if err != nil || len(levels) == 0 || levels[0].Path != cg {
		t.Fatalf("after the move: %+v %v", levels, err)
	}
	// 64 MiB above the usage: room for the JVM and the test agent, and far less than the 1 GiB asked for first.
	limit := levels[0].Usage + 64<<20
	if err := os.WriteFile(filepath.Join(cg, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		t.Fatalf("set %s to %d: %v", limitFile, limit, err)
	}
	res := newTestInjector(t, WithTargetDir(testTargetDir(t)), WithMinMemoryHeadroom(1<<30)).Inject(t.Context(), jv.Pid, loopbackAgent(freePort(t)))
	if res.Reason != ReasonInsufficientMemory || !strings.Contains(res.Message, "MiB of room, less than the 1024.0 MiB") ||
		!strings.Contains(res.Message, cg) {
		t.Fatalf("result %+v, want %s with the figures of %s", res, ReasonInsufficientMemory, cg)
	}
	t.Logf("refused: %s", res.Message)
	assertUntouched(t, jv)

	port := freePort(t)
	requireOK(t, newTestInjector(t, WithTargetDir(testTargetDir(t))).Inject(t.Context(), jv.Pid, loopbackAgent(port)))
	if scrapeHeap(t, jv.Pid, port) <= 0 {
		t.Fatal("no heap metric")
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
