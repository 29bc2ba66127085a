// Command pause is the sandbox ("pause") container of the test node that
// pkg/testenv runs: it holds the pod's namespaces open, reaps the zombies it
// inherits as PID 1 of a pod that shares its process namespace, and exits
// cleanly on SIGINT or SIGTERM. It is built static (CGO_ENABLED=0) so the
// image needs nothing but this one file.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("handlerkit pause")
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child without blocking; SIGCHLD coalesces, so
// one signal may stand for several children.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
