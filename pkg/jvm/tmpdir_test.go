package jvm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// startJVMInMountNS runs script with /bin/sh as root in a new mount namespace whose mounts are private to it,
// with env added to its environment; the script sets up the JVM's filesystem and runs `exec "$@"`, which
// starts the sample application (the java launcher, the class path as the JVM will see it, the main class).
// It returns the JVM's pid once the application is ready; the JVM is killed at cleanup.
func startJVMInMountNS(t *testing.T, script string, env []string, java, classPath string) int {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "set -e; mount --make-rprivate /; "+script, "sh", java, "-Xmx64m", "-cp", classPath, testApp.MainClass)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Setpgid: true}
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	exited, err := startChild(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-exited })
	if err := jvmtest.WaitReady(out, 60*time.Second); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	return cmd.Process.Pid
}

// worldWritable makes dir (and its parents, 0755) with mode 0777 and no sticky bit, as the kubelet makes an
// emptyDir, puts a copy of the sample application in it, and returns it.
func worldWritable(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(testApp.Jar)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app.jar"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// emptyDirPath is where the kubelet keeps a pod's emptyDir volume named tmp, below a test's directory.
const emptyDirPath = "var/lib/kubelet/pods/5f0c4a3e-8d1b-4c2a-9e7f-0a1b2c3d4e5f/volumes/kubernetes.io~empty-dir/tmp"

// TestInjectIntoAPodWithAnEmptyDirTmp runs JVMs whose /tmp is their own mount of a world-writable, not sticky
// directory, as in a pod with readOnlyRootFilesystem and an emptyDir on /tmp. The kubelet's emptyDir (the
// mount's root is its pods/<uid>/volumes/kubernetes.io~empty-dir/<name> directory) is injected, on JDK 17 and
// the newest JDK; the same mode on a mount of any other directory (a hostPath, the node's /tmp), and a
// world-writable directory inside the emptyDir that is not its root, are refused with copy-failed, the JVM
// untouched.
func TestInjectIntoAPodWithAnEmptyDirTmp(t *testing.T) {
	t.Parallel()
	needJava(t)
	const mountTmp = `mount --bind "$TMPSRC" /tmp; cd /tmp; exec "$@"`
	for _, jdk := range testJDKs(t) {
		t.Run(jdk.name, func(t *testing.T) {
			t.Parallel()
			vol := worldWritable(t, filepath.Join(testTargetDir(t), emptyDirPath))
			if err := os.Mkdir(filepath.Join(vol, "shared"), 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(vol, "shared"), 0o777); err != nil {
				t.Fatal(err)
			}
			pid := startJVMInMountNS(t, mountTmp, []string{"TMPSRC=" + vol}, jdk.java, "/tmp/app.jar")

			res := newTestInjector(t, WithTargetDir("/tmp/shared")).Inject(t.Context(), pid, loopbackAgent(freePort(t)))
			if res.Reason != ReasonCopyFailed || !strings.Contains(res.Message, "not the root of a pod's emptyDir volume") {
				t.Fatalf("a world-writable directory inside the emptyDir: %+v, want %s", res, ReasonCopyFailed)
			}
			if _, err := os.Lstat(filepath.Join(vol, ".java_pid"+itoa(pid))); err == nil {
				t.Fatal("the JVM was signalled")
			}

			port := freePort(t)
			res = newTestInjector(t).Inject(t.Context(), pid, loopbackAgent(port))
			requireOK(t, res)
			if !strings.HasPrefix(res.AgentPath, "/tmp/"+AgentDirPrefix) {
				t.Fatalf("agent path %s is not in the JVM's /tmp", res.AgentPath)
			}
			if scrapeHeap(t, pid, port) <= 0 {
				t.Fatal("no heap metric")
			}
		})
	}
	t.Run("not a pod volume", func(t *testing.T) {
		t.Parallel()
		for _, src := range []string{"hostpath/tmp", "var/lib/kubelet/pods/5f0c4a3e/volumes/kubernetes.io~host-path/tmp"} {
			dir := worldWritable(t, filepath.Join(testTargetDir(t), src))
			pid := startJVMInMountNS(t, mountTmp, []string{"TMPSRC=" + dir}, "java", "/tmp/app.jar")
			res := newTestInjector(t).Inject(t.Context(), pid, loopbackAgent(freePort(t)))
			if res.Reason != ReasonCopyFailed || !strings.Contains(res.Message, "not sticky") {
				t.Fatalf("%s: %+v, want %s", src, res, ReasonCopyFailed)
			}
			if _, err := os.Lstat(filepath.Join(dir, ".java_pid"+itoa(pid))); err == nil {
				t.Fatalf("%s: the JVM was signalled", src)
			}
		}
	})
}

// TestInjectIntoAJVMWhoseTmpIsASymbolicLink runs JVMs in a root of their own (chroot) whose /tmp is a symbolic
// link to /var/tmp, on JDK 17 and the newest JDK: the link is resolved inside the JVM's root, the copies go to
// /var/tmp (checked as a real directory is), and the agent serves.
func TestInjectIntoAJVMWhoseTmpIsASymbolicLink(t *testing.T) {
	t.Parallel()
	needJava(t)
	for _, jdk := range testJDKs(t) {
		t.Run(jdk.name, func(t *testing.T) {
			t.Parallel()
			root := testTargetDir(t)
			for _, d := range []string{"usr", "etc", "dev", "proc", "sys", "var/tmp", "app"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(filepath.Join(root, "var/tmp"), 0o777|os.ModeSticky); err != nil {
				t.Fatal(err)
			}
			for link, to := range map[string]string{"tmp": "/var/tmp", "bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"} {
				if err := os.Symlink(to, filepath.Join(root, link)); err != nil {
					t.Fatal(err)
				}
			}
			worldWritable(t, filepath.Join(root, "app"))
			if err := os.Chmod(filepath.Join(root, "app"), 0o755); err != nil {
				t.Fatal(err)
			}
			script := `for d in usr etc dev sys; do mount --rbind /$d "$NEWROOT/$d"; done; mount -t proc proc "$NEWROOT/proc"; exec chroot "$NEWROOT" "$@"`
			pid := startJVMInMountNS(t, script, []string{"NEWROOT=" + root}, jdk.java, "/app/app.jar")

			port := freePort(t)
			res := newTestInjector(t).Inject(t.Context(), pid, loopbackAgent(port))
			requireOK(t, res)
			if !strings.HasPrefix(res.AgentPath, "/var/tmp/"+AgentDirPrefix) {
				t.Fatalf("agent path %s: the copies did not go to the link's target", res.AgentPath)
			}
			if _, err := os.Stat(filepath.Join(root, res.AgentPath)); err != nil {
				t.Fatalf("copies: %v", err)
			}
			if scrapeHeap(t, pid, port) <= 0 {
				t.Fatal("no heap metric")
			}
		})
	}
}

func TestParseMountInfoDecodesEscapesAndSkipsJunk(t *testing.T) {
	data := []byte("36 35 98:0 /var/lib/kubelet/pods/ab-12/volumes/kubernetes.io~empty-dir/my\\040tmp /tmp rw,noatime master:1 - ext4 /dev/root rw,errors=continue\n" +
		"garbage line\n" +
		"37 35 0:30 / /proc rw - proc proc rw\n")
	m := ParseMountInfo(data)
	if len(m) != 2 {
		t.Fatalf("mounts: %+v", m)
	}
	got := m[36]
	if got.Root != "/var/lib/kubelet/pods/ab-12/volumes/kubernetes.io~empty-dir/my tmp" || got.MountPoint != "/tmp" ||
		got.FSType != "ext4" || got.Source != "/dev/root" || got.SuperOptions != "rw,errors=continue" {
		t.Fatalf("mount 36: %+v", got)
	}
	if !emptyDirRoot.MatchString(got.Root) || emptyDirRoot.MatchString("/tmp") ||
		emptyDirRoot.MatchString("/var/lib/kubelet/pods/ab-12/volumes/kubernetes.io~host-path/x") {
		t.Fatal("emptyDirRoot matches the wrong roots")
	}
}
