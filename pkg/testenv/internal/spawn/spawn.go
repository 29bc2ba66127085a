// Package spawn starts child processes that die with the test binary, even
// when it is killed with SIGKILL: pkg/testenv's components and the Prometheus
// server of pkg/testenv/prometheus are started through it.
package spawn

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// spawner owns one OS thread that never exits. Pdeathsig fires when the
// thread that forked the child ends, not the process, and the Go runtime ends
// threads whose goroutine exits while locked to them; forking only from this
// thread ties the children's lives to the process's.
var spawner struct {
	once sync.Once
	reqs chan func()
}

// Start starts cmd with Pdeathsig SIGKILL (other SysProcAttr fields are kept)
// from the spawner thread.
func Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	var err error
	onSpawnerThread(func() { err = cmd.Start() })
	return err
}

func onSpawnerThread(f func()) {
	spawner.once.Do(func() {
		spawner.reqs = make(chan func())
		go func() {
			runtime.LockOSThread()
			for req := range spawner.reqs {
				req()
			}
		}()
	})
	done := make(chan struct{})
	spawner.reqs <- func() { f(); close(done) }
	<-done
}
