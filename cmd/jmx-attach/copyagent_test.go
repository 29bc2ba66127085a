package main

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copy-agent is the command of the start-time injection's init container (pkg/inject/atstart): the shipped jar,
// copied read-only, whole, and again on a restart of the pod (the emptyDir keeps the first copy).
func TestCopyAgentCopiesTheShippedJarReadOnly(t *testing.T) {
	shipped := shippedAgentCopy(t)
	want, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i := range 2 {
		stdout, stderr, code := runBinary(t, "copy-agent", "--from", shipped, "--to", dir)
		if code != exitOK || !strings.Contains(stdout, "Premain-Class dev.handlerkit.jmxagent.Agent") {
			t.Fatalf("run %d: exit %d\nstdout: %s\nstderr: %s", i, code, stdout, stderr)
		}
		dst := filepath.Join(dir, filepath.Base(shipped))
		got, err := os.ReadFile(dst)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("run %d: the copy differs from the jar (%d bytes, %v)", i, len(got), err)
		}
		if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o444 {
			t.Errorf("run %d: mode %v, want 0444", i, fi.Mode().Perm())
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Errorf("run %d: %d entries in the directory, want the jar alone", i, len(entries))
		}
	}
	out, _, code := runBinary(t, "help", "copy-agent")
	if code != exitOK || !strings.Contains(out, "Usage: jmx-attach copy-agent") {
		t.Errorf("help copy-agent: exit %d\n%s", code, out)
	}
}

func TestCopyAgentRefusesWhatNoJVMCouldLoadAtStart(t *testing.T) {
	src := t.TempDir()
	notZip := filepath.Join(src, "not-a-jar.jar")
	if err := os.WriteFile(notZip, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A jar for run-time loads only: an Agent-Class but no Premain-Class.
	attachOnly := filepath.Join(src, "attach-only.jar")
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create("META-INF/MANIFEST.MF")
	w.Write([]byte("Manifest-Version: 1.0\r\nAgent-Class: x.Agent\r\n\r\n"))
	zw.Close()
	if err := os.WriteFile(attachOnly, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, from, want string
	}{
		{"not a zip", notZip, "zip: not a valid zip file"},
		{"no Premain-Class", attachOnly, "its manifest names no Premain-Class"},
		{"missing", filepath.Join(src, "missing.jar"), "no such file"},
		{"a directory", src, "is not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, stderr, code := runBinary(t, "copy-agent", "--from", tc.from, "--to", dir)
			if code != exitBadAgent || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, exitBadAgent, tc.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("%d entries written", len(entries))
			}
		})
	}
	shipped := shippedAgentCopy(t)
	if _, stderr, code := runBinary(t, "copy-agent", "--from", shipped); code != exitUsage {
		t.Errorf("no --to: exit %d, %s", code, stderr)
	}
	if _, stderr, code := runBinary(t, "copy-agent", "--from", shipped, "--to", filepath.Join(src, "no", "such", "dir")); code != exitFailed || stderr == "" {
		t.Errorf("missing directory: exit %d, %s", code, stderr)
	}
}
