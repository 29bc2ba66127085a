package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestStaleNodesAreCleanedOnlyUnderTheClusterLock: a killed test binary's
// node directory names its bridge. The moment its lock is gone, the next
// cluster-mode environment may create a bridge of that name; a cleanup
// running beside it (another binary's Start) deleted that new bridge, and
// the new apiserver could not listen on its address. So the cleanup of a
// node directory waits for the cluster lock: while someone holds it, the
// directory and the bridge of its name are left alone.
func TestStaleNodesAreCleanedOnlyUnderTheClusterLock(t *testing.T) {
	if err := preflight(); err != nil {
		SkipOrFail(t, err)
	}
	// Hold the cluster lock, as a starting cluster-mode environment does,
	// before the stale directory exists: no other binary's lock holder can
	// clean it meanwhile.
	lock, err := acquireClusterLock(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lock.Close()
		processLock.Unlock()
	})
	// A pid that is dead: a process that has exited.
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	dead := done.Process.Pid
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	const bridge = "hktest97"
	if err := os.MkdirAll(filepath.Join(dir, "node"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"owner.pid": strconv.Itoa(dead), "node/bridge": bridge} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("ip", "link", "add", "name", bridge, "type", "bridge").CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "link", "delete", bridge).Run() })
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }

	// Any Start (here a control-plane one) while the lock is held leaves the
	// node directory and the bridge of its name alone.
	removeStaleDirs(false)
	if !exists(dir) || !exists(filepath.Join("/sys/class/net", bridge)) {
		t.Fatalf("a Start without the cluster lock cleaned a node directory (dir there: %v, bridge there: %v)",
			exists(dir), exists(filepath.Join("/sys/class/net", bridge)))
	}
	// The lock holder cleans it (claimNetwork does this once it has the lock).
	removeStaleDirs(true)
	if exists(dir) || exists(filepath.Join("/sys/class/net", bridge)) {
		t.Errorf("the lock holder did not clean the stale node (dir there: %v, bridge there: %v)",
			exists(dir), exists(filepath.Join("/sys/class/net", bridge)))
	}
}
