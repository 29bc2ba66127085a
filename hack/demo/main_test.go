package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCtrlCOnMakeDemoIsACleanStop runs `make demo` as a terminal runs it,
// in a process group of its own (a session, as setsid makes), and sends
// SIGINT to the whole group once the demo runs, as Ctrl-C does. The demo
// must stop cleanly (exit 0), so that make prints no "Error" and no
// "Interrupt", and no process of the session may be left.
//
// The demo runs with -idle, which starts no cluster but waits for Ctrl-C and
// stops exactly as the full demo does once it runs: the full demo takes
// minutes to start, too long for the test suite. The prerequisites are
// taken as made (make -o), so that make runs only the demo's own recipe.
//
// make itself, having received SIGINT, ends by SIGINT once its child has
// exited (GNU make re-raises a fatal signal after cleaning up, so that a
// calling shell stops too): that is the terminal's exit status 130, and it
// prints nothing. A make that exits 0 instead is accepted too.
func TestCtrlCOnMakeDemoIsACleanStop(t *testing.T) {
	makePath, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// A signal ignored by this process would be ignored by make and the
	// demo too (an ignored signal stays ignored across exec, as in a
	// background job of a shell). Handling it here makes the children
	// start with the default action, as under a terminal.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)

	cmd := exec.Command(makePath, "--no-print-directory", "-o", "prereqs", "-o", "controlplane", "-o", "node", "-o", "prometheus",
		"-o", "images", "demo", "DEMOFLAGS=-idle", "BIN="+t.TempDir())
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	sid := cmd.Process.Pid
	defer func() {
		// Whatever happened, nothing of the session outlives the test.
		for _, pid := range session(t, sid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}()

	var out bytes.Buffer
	ready := make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if !once && strings.Contains(sc.Text(), "running; press Ctrl-C") {
				once = true
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-readDone:
		_ = cmd.Wait()
		t.Fatalf("make demo ended before the demo ran:\n%s", out.String())
	case <-time.After(5 * time.Minute):
		t.Fatal("the demo did not get ready within 5 minutes")
	}
	if err := syscall.Kill(-sid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitErr := cmd.Wait()
	<-readDone
	output := out.String()
	var exitErr *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &exitErr):
		ws, ok := exitErr.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
			t.Errorf("make ended with %v; want exit 0, or GNU make's own re-raised SIGINT", waitErr)
		}
	default:
		t.Fatal(waitErr)
	}
	for _, bad := range []string{"Error", "Interrupt", "make: ***"} {
		if strings.Contains(output, bad) {
			t.Errorf("make's output has %q:\n%s", bad, output)
		}
	}
	if !strings.Contains(output, "==> stopping") {
		t.Errorf("the demo did not say it stopped:\n%s", output)
	}
	if left := session(t, sid); len(left) > 0 {
		t.Errorf("processes of make demo's session left: %v", left)
	}
}

// session returns the processes of session sid.
func session(t *testing.T, sid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// After the command's name in parentheses: state, ppid, pgrp, session.
		i := bytes.LastIndexByte(data, ')')
		f := strings.Fields(string(data[i+1:]))
		if len(f) > 3 && f[3] == strconv.Itoa(sid) {
			out = append(out, pid)
		}
	}
	return out
}
