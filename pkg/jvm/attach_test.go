package jvm

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// allThreadsHaveCreds checks every thread of this process against the process's own effective uid and gid, so
// that a thread left with a target's credentials is caught.
func allThreadsHaveCreds(t *testing.T, uid, gid int) {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		data, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "status"))
		if err != nil {
			continue // the thread ended
		}
		st, err := ParseStatus(data)
		if err != nil {
			t.Fatal(err)
		}
		if st.UID != [4]int{uid, uid, uid, uid} || st.GID != [4]int{gid, gid, gid, gid} {
			t.Errorf("thread %s has uids %v gids %v", task.Name(), st.UID, st.GID)
		}
	}
}

func TestConnectAsPresentsTargetCredentialsAndRestoresThread(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root, as jmx-attach does")
	}
	const uid, gid = 65534, 65534
	// Not t.TempDir: its parent is not searchable by the other user.
	dir, err := os.MkdirTemp("", "connect-as-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	const n = 20
	peers := make(chan *unix.Ucred, n)
	go func() {
		for i := 0; i < n; i++ {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			raw, _ := c.SyscallConn()
			raw.Control(func(fd uintptr) {
				cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
				if err == nil {
					peers <- cred
				}
			})
			c.Close()
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := connectAs(sock, uid, gid)
			if err != nil {
				errs <- err
				return
			}
			c.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		p := <-peers
		if p.Uid != uid || p.Gid != gid {
			t.Fatalf("peer credentials %d:%d, want %d:%d", p.Uid, p.Gid, uid, gid)
		}
	}
	allThreadsHaveCreds(t, 0, 0)
}

func TestConnectAsReportsConnectErrors(t *testing.T) {
	_, err := connectAs(filepath.Join(t.TempDir(), "absent"), 65534, 65534)
	if err == nil || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("err = %v", err)
	}
	allThreadsHaveCreds(t, 0, 0)
}
