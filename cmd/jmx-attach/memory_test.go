package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// memoryHierarchy returns where this machine's memory controller is mounted, this process's cgroup in it, the
// file that sets a limit there, and the mount command for a cgroup namespace's own view of it.
func memoryHierarchy(t *testing.T) (mount, self, limitFile, mountCmd string) {
	t.Helper()
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if strings.Contains(","+f[1]+",", ",memory,") && fileExists("/sys/fs/cgroup/memory/cgroup.procs") {
			return "/sys/fs/cgroup/memory", f[2], "memory.limit_in_bytes", "umount -l /sys/fs/cgroup/memory && mount -t cgroup -o memory handlerkit-memory /sys/fs/cgroup/memory"
		}
		if f[0] == "0" && f[1] == "" && fileExists(filepath.Join("/sys/fs/cgroup", f[2], "memory.max")) {
			self = f[2]
		}
	}
	if self == "" {
		t.Fatal("no memory controller mounted at /sys/fs/cgroup (v2) or /sys/fs/cgroup/memory (v1)")
	}
	return "/sys/fs/cgroup", self, "memory.max", "umount -l /sys/fs/cgroup && mount -t cgroup2 handlerkit-cgroup2 /sys/fs/cgroup"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// newCgroup creates a child of parent, removed at cleanup once its processes have ended.
func newCgroup(t *testing.T, parent, name string) string {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			err := os.Remove(dir)
			if err == nil || time.Now().After(deadline) {
				if err != nil {
					t.Errorf("remove cgroup %s: %v", dir, err)
				}
				return
			}
		}
	})
	return dir
}

// TestMemoryHeadroomFromAnEphemeralContainersView runs the JVM as a container does, in a memory cgroup with a
// limit, in a cgroup namespace of its own with its own mount of the cgroup hierarchy, and jmx-attach as an
// ephemeral container does, in a sibling cgroup and a cgroup namespace of its own, where the JVM's cgroup path
// is outside its view (/../<cgroup>). jmx-attach finds the limit through the JVM's own mount, and refuses the
// JVM with insufficient-memory when the limit leaves less room than --min-memory-headroom, before any
// signal; with a smaller requirement it injects.
func TestMemoryHeadroomFromAnEphemeralContainersView(t *testing.T) {
	t.Parallel()
	mount, self, limitFile, mountCmd := memoryHierarchy(t)
	parent := filepath.Join(mount, self)
	name := "handlerkit-test-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	jvmCg := newCgroup(t, parent, name+"-jvm")
	helperCg := newCgroup(t, parent, name+"-helper")

	script := `set -e
echo $$ > "$CG/cgroup.procs"
exec unshare --cgroup --mount --propagation private /bin/sh -c "$MOUNTCMD && exec \"\$@\"" sh "$@"`
	cmd := exec.Command("/bin/sh", "-c", script, "sh", "java", "-Xmx64m", "-cp", app.Jar, app.MainClass)
	cmd.Env = append(os.Environ(), "CG="+jvmCg, "MOUNTCMD="+mountCmd)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if err := jvmtest.WaitReady(stdout, 60*time.Second); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	pid := cmd.Process.Pid

	usage, err := os.ReadFile(filepath.Join(jvmCg, map[bool]string{true: "memory.usage_in_bytes", false: "memory.current"}[limitFile == "memory.limit_in_bytes"]))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(usage)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	// 64 MiB above the usage: room for the JVM, and far less than the 1 GiB asked for below.
	if err := os.WriteFile(filepath.Join(jvmCg, limitFile), []byte(strconv.FormatInt(n+64<<20, 10)), 0o644); err != nil {
		t.Fatal(err)
	}

	helper := `echo $$ > "$CG/cgroup.procs" && exec unshare --cgroup "$@"`
	inject := func(headroom string) (jvm.InjectResult, int, string) {
		c := exec.Command("/bin/sh", "-c", helper, "sh", binary, "inject", "--agent", agentJar, "--config", config,
			"--port", strconv.Itoa(freePort(t)), "--host", "127.0.0.1", "--pid", strconv.Itoa(pid), "--min-age", "0s",
			"--min-memory-headroom", headroom, "--json", "--target-dir", targetDir(t), "--termination-log", "")
		c.Env = append(os.Environ(), "CG="+helperCg)
		var out, errOut strings.Builder
		c.Stdout, c.Stderr = &out, &errOut
		err := c.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return parseLines(t, out.String())[0], code, errOut.String()
	}
	res, code, errOut := inject("1Gi")
	want := "/proc/" + strconv.Itoa(pid) + "/root" + mount
	if code != exitFailed || res.Reason != jvm.ReasonInsufficientMemory || !strings.Contains(res.Message, want) {
		t.Fatalf("exit %d, %+v, want %s through %s\nstderr: %s", code, res, jvm.ReasonInsufficientMemory, want, errOut)
	}
	t.Logf("refused: %s", res.Message)
	if jvmtest.AttachListenerStarted(pid) {
		t.Fatal("the JVM was signalled")
	}
	res, code, errOut = inject("1Mi")
	if code != exitOK || res.Status != jvm.OutcomeOK {
		t.Fatalf("with room enough: exit %d, %+v\nstderr: %s", code, res, errOut)
	}
}
