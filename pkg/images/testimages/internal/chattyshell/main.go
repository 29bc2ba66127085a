// Command chattyshell is the test image ChattyShellRef's entrypoint and its
// /bin/sh. Run as sh (any arguments), it prints "y" lines without end, as a
// tenant's shell might, until its stdout is closed; otherwise it waits for
// SIGTERM, as a long-running application does.
package main

import (
	"bytes"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() {
	if filepath.Base(os.Args[0]) == "sh" {
		chunk := bytes.Repeat([]byte("y\n"), 32<<10)
		for {
			if _, err := os.Stdout.Write(chunk); err != nil {
				os.Exit(1)
			}
		}
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
