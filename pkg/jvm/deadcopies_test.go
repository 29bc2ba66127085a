package jvm

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// TestInjectionRemovesTheCopiesOfJVMsThatAreGone injects real JVMs into one target directory, stops one, and
// injects a third: the copies of the JVM that is gone are removed (with its lock file and marker), those of
// the JVM that still runs stay and it keeps serving, and nothing jmx-attach did not create is touched: a
// directory of the same name pattern without an owner record, a symbolic link of that pattern to a dead JVM's
// copies (neither followed nor removed), and the copies of a dead JVM whose lock someone holds.
func TestInjectionRemovesTheCopiesOfJVMsThatAreGone(t *testing.T) {
	needJava(t)
	target := t.TempDir()
	if err := os.Chmod(target, 0o755); err != nil {
		t.Fatal(err)
	}
	in := newTestInjector(t, WithTargetDir(target))
	ctx := context.Background()
	inject := func(jv *jvmtest.JVM) InjectResult {
		t.Helper()
		res := in.Inject(ctx, jv.Pid, loopbackAgent(freePort(t)))
		if res.Status != OutcomeOK {
			t.Fatalf("inject pid %d: %+v\n%s", jv.Pid, res, jv.Output())
		}
		t.Cleanup(func() { _ = os.Remove(markerPathOf(jv.Pid)) })
		return res
	}
	dead := jvmtest.StartJVM(t, jvmtest.Options{App: testApp})
	deadRes := inject(dead)
	live := jvmtest.StartJVM(t, jvmtest.Options{App: testApp})
	liveRes := inject(live)
	deadDir, liveDir := filepath.Dir(deadRes.AgentPath), filepath.Dir(liveRes.AgentPath)
	deadJVM, err := Inspect(dead.Pid)
	if err != nil {
		t.Fatal(err)
	}
	lockFile := filepath.Join("/tmp", filepath.Base(lockPath(deadJVM)))
	t.Cleanup(func() { _ = os.Remove(lockFile) })

	// A dead JVM whose lock is held (an injection at work) and one behind a symbolic link.
	locked := jvmtest.StartJVM(t, jvmtest.Options{App: testApp})
	lockedRes := inject(locked)
	lockedJVM, _ := Inspect(locked.Pid)
	linked := jvmtest.StartJVM(t, jvmtest.Options{App: testApp})
	linkedRes := inject(linked)
	linkedJVM, _ := Inspect(linked.Pid)
	for _, j := range []JVM{lockedJVM, linkedJVM} {
		p := filepath.Join("/tmp", filepath.Base(lockPath(j)))
		t.Cleanup(func() { _ = os.Remove(p) })
	}
	hidden := t.TempDir()
	if err := os.Rename(filepath.Dir(linkedRes.AgentPath), filepath.Join(hidden, "copies")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(target, AgentDirPrefix+"00000000000000aa")
	if err := os.Symlink(filepath.Join(hidden, "copies"), link); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(target, AgentDirPrefix+"00000000000000bb")
	if err := os.Mkdir(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(foreign, "agent.jar"), []byte("not ours"), 0o444); err != nil {
		t.Fatal(err)
	}
	for _, jv := range []*jvmtest.JVM{dead, locked, linked} {
		if err := jv.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	// jvmtest removes what a stopped JVM leaves in /tmp; put back the dead JVM's lock file and marker, as a JVM
	// that died leaves them.
	if err := os.WriteFile(lockFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m, _ := json.Marshal(marker{Port: deadRes.Port, AgentPath: deadRes.AgentPath, ConfigPath: deadRes.ConfigPath, StartTicks: deadJVM.StartTicks})
	if err := os.WriteFile(markerPathOf(dead.Pid), m, 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := unix.Open(filepath.Join("/tmp", filepath.Base(lockPath(lockedJVM))), unix.O_RDONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(held)
	if err := unix.Flock(held, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	next := jvmtest.StartJVM(t, jvmtest.Options{App: testApp})
	inject(next)

	if _, err := os.Lstat(deadDir); !os.IsNotExist(err) {
		t.Errorf("the copies of the JVM that is gone are still there: %v", err)
	}
	if _, err := os.Lstat(lockFile); !os.IsNotExist(err) {
		t.Errorf("the lock file of the JVM that is gone is still there: %v", err)
	}
	if _, err := os.Lstat(markerPathOf(dead.Pid)); !os.IsNotExist(err) {
		t.Errorf("the marker of the JVM that is gone is still there: %v", err)
	}
	for what, p := range map[string]string{
		"the running JVM's copies":                    liveRes.AgentPath,
		"the copies of a dead JVM whose lock is held": lockedRes.AgentPath,
		"a directory without an owner record":         filepath.Join(foreign, "agent.jar"),
		"the symbolic link":                           link,
		"what the symbolic link points to":            filepath.Join(hidden, "copies", filepath.Base(linkedRes.AgentPath)),
	} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s (%s) was removed: %v", what, p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(liveDir, AgentDirOwnerFile)); err != nil {
		t.Errorf("owner record: %v", err)
	}
	if body, err := Scrape(ctx, live.Pid, "127.0.0.1", liveRes.Port); err != nil || len(body) == 0 {
		t.Errorf("the running JVM no longer serves: %v\n%s", err, live.Output())
	}
	// The owner record names the JVM.
	data, err := os.ReadFile(filepath.Join(liveDir, AgentDirOwnerFile))
	if err != nil {
		t.Fatal(err)
	}
	var o agentDirOwner
	liveJVM, _ := Inspect(live.Pid)
	if json.Unmarshal(data, &o) != nil || o.NSPID != liveJVM.NSPID || o.StartTicks != liveJVM.StartTicks {
		t.Errorf("owner record %s, want pid %d started at %d", data, liveJVM.NSPID, liveJVM.StartTicks)
	}
}

// markerPathOf is the host path of the marker of a JVM on the host.
func markerPathOf(pid int) string { return "/tmp/" + markerPrefix + strconv.Itoa(pid) + ".json" }
