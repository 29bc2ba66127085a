package jvm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// nobody is the unprivileged user the tests use as a hostile local user and as a JVM's user.
const nobody = 65534

// assertCopiesOwnedBy checks an agent directory against the copy directory's security model: the directory is
// uid:gid's with mode 0700, and every file in it is root's, mode 0444, with a single link.
func assertCopiesOwnedBy(t *testing.T, dir string, uid, gid int) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR || int(st.Uid) != uid || int(st.Gid) != gid || st.Mode&0o7777 != 0o700 {
		t.Errorf("%s: mode %o owner %d:%d, want a directory with mode 700 owned by %d:%d", dir, st.Mode, st.Uid, st.Gid, uid, gid)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Errorf("%s is empty", dir)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Uid != 0 || st.Mode&0o7777 != 0o444 || st.Nlink != 1 {
			t.Errorf("%s: mode %o uid %d links %d, want a regular file with mode 444 owned by root", p, st.Mode, st.Uid, st.Nlink)
		}
	}
}

// runAs runs the shell script as uid:gid (with no supplementary groups) and returns its error and output.
func runAs(t *testing.T, uid, gid int, script string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// parentDir returns a new directory with the given owner and mode, inside a root-owned directory every user can
// search, removed after the test.
func parentDir(t *testing.T, uid int, mode os.FileMode) string {
	t.Helper()
	base := testTargetDir(t)
	dir := filepath.Join(base, "parent")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

func testFiles() []namedData {
	return []namedData{{name: "agent.jar", data: []byte("not really a jar")}, {name: "config.yaml", data: []byte("rules: []\n")}}
}

func TestAgentDirIsNewPrivateReadOnlyAndTheTargetUsers(t *testing.T) {
	parent := testTargetDir(t)
	var seen []string
	for range 2 {
		d, paths, err := copyToTarget(os.Getpid(), parent, nobody, nobody, testFiles()...)
		if err != nil {
			t.Fatal(err)
		}
		d.close()
		dir := filepath.Dir(paths[0])
		if filepath.Dir(dir) != parent || !strings.HasPrefix(filepath.Base(dir), AgentDirPrefix) {
			t.Fatalf("copies in %s, want a new %s<random> directory in %s", dir, AgentDirPrefix, parent)
		}
		assertCopiesOwnedBy(t, dir, nobody, nobody)
		for _, s := range seen {
			if s == dir {
				t.Fatalf("directory %s used twice", dir)
			}
		}
		seen = append(seen, dir)
		// The other users of the machine can neither read nor change anything in it.
		if out, err := runAs(t, 1, 1, `ls "$1" || exit 0; exit 1`, dir); err != nil {
			t.Errorf("uid 1 could list %s: %v %s", dir, err, out)
		}
	}
}

// TestAgentDirRefusesParentsOthersControl covers the parent directory's checks: a directory someone other than
// root or the JVM's user could change, or a symbolic link, never receives the copies.
func TestAgentDirRefusesParentsOthersControl(t *testing.T) {
	const jvmUser = 1000
	cases := []struct {
		name   string
		parent func(t *testing.T) string
		ok     bool
	}{
		{"root's, 0755", func(t *testing.T) string { return parentDir(t, 0, 0o755) }, true},
		{"root's, sticky and world-writable like /tmp", func(t *testing.T) string { return parentDir(t, 0, 0o777|os.ModeSticky) }, true},
		{"the JVM user's", func(t *testing.T) string { return parentDir(t, jvmUser, 0o755) }, true},
		{"another user's", func(t *testing.T) string { return parentDir(t, nobody, 0o755) }, false},
		{"root's but world-writable, not sticky", func(t *testing.T) string { return parentDir(t, 0, 0o777) }, false},
		{"root's but group-writable", func(t *testing.T) string { return parentDir(t, 0, 0o775) }, false},
		{"below another user's directory", func(t *testing.T) string {
			dir := filepath.Join(parentDir(t, nobody, 0o755), "sub")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			return dir
		}, false},
		{"root's symbolic link to root's directory", func(t *testing.T) string {
			return symlinkTo(t, parentDir(t, 0, 0o755), 0, true)
		}, true},
		{"root's relative symbolic link through .. to root's directory", func(t *testing.T) string {
			return symlinkTo(t, parentDir(t, 0, 0o755), 0, false)
		}, true},
		{"root's symbolic link to root's sticky world-writable directory", func(t *testing.T) string {
			return symlinkTo(t, parentDir(t, 0, 0o777|os.ModeSticky), 0, true)
		}, true},
		{"another user's symbolic link to root's directory", func(t *testing.T) string {
			return symlinkTo(t, parentDir(t, 0, 0o755), nobody, true)
		}, false},
		{"root's symbolic link to another user's directory", func(t *testing.T) string {
			return symlinkTo(t, parentDir(t, nobody, 0o755), 0, true)
		}, false},
		{"root's symbolic link to a world-writable directory, not sticky", func(t *testing.T) string {
			return symlinkTo(t, parentDir(t, 0, 0o777), 0, true)
		}, false},
		{"a symbolic link loop", func(t *testing.T) string {
			dir := testTargetDir(t)
			loop := filepath.Join(dir, "loop")
			if err := os.Symlink(loop, loop); err != nil {
				t.Fatal(err)
			}
			return loop
		}, false},
		{"missing", func(t *testing.T) string { return filepath.Join(testTargetDir(t), "absent") }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent := tc.parent(t)
			d, paths, err := copyToTarget(os.Getpid(), parent, jvmUser, jvmUser, testFiles()...)
			if tc.ok {
				if err != nil {
					t.Fatalf("copy under %s: %v", parent, err)
				}
				d.close()
				assertCopiesOwnedBy(t, filepath.Dir(paths[0]), jvmUser, jvmUser)
				real, err := filepath.EvalSymlinks(parent)
				if err != nil || filepath.Dir(filepath.Dir(paths[0])) != real {
					t.Fatalf("copies %s are not under the real path %s of %s (%v)", paths[0], real, parent, err)
				}
				return
			}
			if err == nil {
				d.close()
				t.Fatalf("copied under %s: %v", parent, paths)
			}
			entries, _ := os.ReadDir(parent)
			if len(entries) != 0 {
				t.Errorf("%s received %d entries although refused: %v", parent, len(entries), err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// symlinkTo makes a symbolic link owned by uid to target, in a new root-owned directory: absolute, or relative
// through "..". It returns the link's path.
func symlinkTo(t *testing.T, target string, uid int, absolute bool) string {
	t.Helper()
	dir := filepath.Join(testTargetDir(t), "links")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	to := target
	if !absolute {
		rel, err := filepath.Rel(dir, target)
		if err != nil {
			t.Fatal(err)
		}
		to = rel
	}
	link := filepath.Join(dir, "tmp")
	if err := os.Symlink(to, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, uid, uid); err != nil {
		t.Fatal(err)
	}
	return link
}

// TestAgentDirVerifyNoticesEveryChange changes the copies behind the agentDir's back, as root could, and expects
// verify to notice each change.
func TestAgentDirVerifyNoticesEveryChange(t *testing.T) {
	cases := map[string]func(t *testing.T, dir, jar string){
		"content rewritten": func(t *testing.T, dir, jar string) {
			if err := os.Chmod(jar, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(jar, []byte("evil bytes, same len"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(jar, 0o444); err != nil {
				t.Fatal(err)
			}
		},
		"file replaced": func(t *testing.T, dir, jar string) {
			if err := os.Remove(jar); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(jar, []byte("evil bytes, same len"[:len("not really a jar")]), 0o444); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(jar, 0o444); err != nil {
				t.Fatal(err)
			}
		},
		"second link": func(t *testing.T, dir, jar string) {
			if err := os.Link(jar, filepath.Join(filepath.Dir(dir), "hardlink")); err != nil {
				t.Fatal(err)
			}
		},
		"directory replaced": func(t *testing.T, dir, jar string) {
			if err := os.Rename(dir, dir+".old"); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(dir, os.DirFS(dir+".old")); err != nil {
				t.Fatal(err)
			}
		},
		"directory opened to others": func(t *testing.T, dir, jar string) {
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			d, paths, err := copyToTarget(os.Getpid(), testTargetDir(t), 0, 0, testFiles()...)
			if err != nil {
				t.Fatal(err)
			}
			defer d.close()
			if err := d.verify(); err != nil {
				t.Fatalf("verify before the change: %v", err)
			}
			change(t, filepath.Dir(paths[0]), paths[0])
			err = d.verify()
			if err == nil {
				t.Fatal("verify did not notice")
			}
			t.Logf("noticed: %v", err)
		})
	}
}

func TestAgentDirRemoveLeavesNothing(t *testing.T) {
	parent := testTargetDir(t)
	d, _, err := copyToTarget(os.Getpid(), parent, nobody, nobody, testFiles()...)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if err := d.remove(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Fatalf("%s still holds %v", parent, entries)
	}
}

// TestPreCreatedDirectoryAtOldDefaultPathReceivesNothing is the attack of issue 12: a local user creates the
// directory the jar used to be copied to, /tmp/handlerkit-jmx, before the first injection, so that they can
// swap the jar between the copy and the load and run their code in a root JVM. The JVM here runs as root with
// a /tmp of its own (its work directory), where uid 65534 pre-created that directory, writable by all.
func TestPreCreatedDirectoryAtOldDefaultPathReceivesNothing(t *testing.T) {
	t.Parallel()
	needJava(t)
	for _, jdk := range testJDKs(t) {
		t.Run(jdk.name, func(t *testing.T) {
			t.Parallel()
			jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp, Java: jdk.java, JVMArgs: []string{"-Xmx64m"}, PrivateNamespaces: true})
			hostile := filepath.Join(jv.WorkDir, "handlerkit-jmx")
			if out, err := runAs(t, nobody, nobody, `mkdir -m 777 "$1"`, hostile); err != nil {
				t.Fatalf("pre-create %s as %d: %v %s", hostile, nobody, err, out)
			}
			port := freePort(t)
			res := newTestInjector(t).Inject(context.Background(), jv.Pid, loopbackAgent(port))
			requireOK(t, res)
			if entries, err := os.ReadDir(hostile); err != nil || len(entries) != 0 {
				t.Fatalf("the pre-created %s received %v (%v)", hostile, entries, err)
			}
			// The copies the JVM loaded are in a directory of their own, which the hostile user cannot change.
			dir := filepath.Join(jv.WorkDir, filepath.Base(agentDirOf(t, res, DefaultTargetDir)))
			assertCopiesOwnedBy(t, dir, 0, 0)
			jar := filepath.Join(dir, jvmtest.AgentJarName)
			script := `touch "$1/evil" 2>/dev/null && exit 1; mv "$2" "$2.old" 2>/dev/null && exit 2; cat "$2" >/dev/null 2>&1 && exit 3; exit 0`
			if out, err := runAs(t, nobody, nobody, script, dir, jar); err != nil {
				t.Fatalf("uid %d could change or read the copies in %s: %v %s", nobody, dir, err, out)
			}
			scrapeHeap(t, jv.Pid, port)
		})
	}
}

// TestJVMsOfDifferentUsersGetSeparateDirectories injects into a root JVM and a JVM of uid 65534 that share the
// host's /tmp, with the default target directory: each gets a directory of its own, owned by its user.
func TestJVMsOfDifferentUsersGetSeparateDirectories(t *testing.T) {
	t.Parallel()
	needJava(t)
	for _, jdk := range testJDKs(t) {
		t.Run(jdk.name, func(t *testing.T) {
			t.Parallel()
			users := []int{0, nobody}
			dirs := map[string]bool{}
			for _, uid := range users {
				opts := jvmtest.Options{App: testApp, Java: jdk.java, JVMArgs: []string{"-Xmx64m"}}
				if uid != 0 {
					opts.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
				}
				jv := jvmtest.StartJVM(t, opts)
				port := freePort(t)
				res := newTestInjector(t).Inject(context.Background(), jv.Pid, loopbackAgent(port))
				requireOK(t, res)
				dir := agentDirOf(t, res, DefaultTargetDir)
				t.Cleanup(func() { os.RemoveAll(dir) })
				assertCopiesOwnedBy(t, dir, uid, uid)
				if dirs[dir] {
					t.Fatalf("%s used for two JVMs", dir)
				}
				dirs[dir] = true
				scrapeHeap(t, jv.Pid, port)
			}
		})
	}
}

// TestCopiesAreRemovedWhenTheAgentIsNotLoaded: a JVM that refuses the load keeps nothing of the injection. Here
// the JVM's user (65534) cannot search the target directory, which root owns with mode 0700, so the JVM cannot
// open the jar (return code 100); only the JVM finds that out.
func TestCopiesAreRemovedWhenTheAgentIsNotLoaded(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp, JVMArgs: []string{"-Xmx64m"},
		Credential: &syscall.Credential{Uid: nobody, Gid: nobody}})
	parent := parentDir(t, 0, 0o700)
	res := newTestInjector(t, WithTargetDir(parent)).Inject(context.Background(), jv.Pid, loopbackAgent(freePort(t)))
	if res.Status != OutcomeError || res.Reason != ReasonAgentJarInvalid || res.AgentPath != "" || res.ConfigPath != "" {
		t.Fatalf("inject: %+v, want %s without copies", res, ReasonAgentJarInvalid)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Fatalf("%s keeps %v after a failed load", parent, entries)
	}
	if !jv.Alive() {
		t.Fatalf("JVM died: %s", jv.Output())
	}
}
