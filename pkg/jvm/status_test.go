package jvm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadAgentStatusTrustsOnlyTheJVMsOwnFile writes status files as the agent would, and as someone else might,
// and checks which readAgentStatus believes: a regular file of the JVM's user or root, at most 16 KiB, of
// version 1 in a known state; never a symbolic link, another user's file, or an oversized one.
func TestReadAgentStatusTrustsOnlyTheJVMsOwnFile(t *testing.T) {
	const jvmUser = 1000
	good := `{"version":1,"agent":"handlerkit-jmx-agent 0.1.0","state":"refused","reason":"config-invalid","message":"Unclosed group","configSHA256":"ab","host":"","port":9404,"restartRequired":""}`
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		found bool
		ok    bool
	}{
		{"missing", func(*testing.T, string) {}, false, true},
		{"the JVM user's", func(t *testing.T, dir string) { writeOwned(t, dir, good, jvmUser) }, true, true},
		{"root's", func(t *testing.T, dir string) { writeOwned(t, dir, good, 0) }, true, true},
		{"another user's", func(t *testing.T, dir string) { writeOwned(t, dir, good, 65534) }, true, false},
		{"a symbolic link", func(t *testing.T, dir string) {
			target := filepath.Join(t.TempDir(), "elsewhere.json")
			if err := os.WriteFile(target, []byte(good), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(dir, AgentStatusFile)); err != nil {
				t.Fatal(err)
			}
		}, false, false},
		{"a directory", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, AgentStatusFile), 0o755); err != nil {
				t.Fatal(err)
			}
		}, true, false},
		{"over 16 KiB", func(t *testing.T, dir string) {
			writeOwned(t, dir, strings.TrimSuffix(good, "}")+`,"pad":"`+strings.Repeat("x", MaxAgentStatusSize)+`"}`, jvmUser)
		}, true, false},
		{"not JSON", func(t *testing.T, dir string) { writeOwned(t, dir, "{", jvmUser) }, true, false},
		{"unknown state", func(t *testing.T, dir string) {
			writeOwned(t, dir, strings.Replace(good, `"refused"`, `"starting"`, 1), jvmUser)
		}, true, false},
		{"another version", func(t *testing.T, dir string) {
			writeOwned(t, dir, strings.Replace(good, `"version":1`, `"version":2`, 1), jvmUser)
		}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			st, found, err := readAgentStatus(fd, dir, jvmUser)
			if tc.ok != (err == nil) || (err == nil && found != tc.found) {
				t.Fatalf("found %v, err %v; want found %v, ok %v", found, err, tc.found, tc.ok)
			}
			if tc.ok && tc.found && (st.State != AgentRefused || st.Reason != "config-invalid" || st.Message != "Unclosed group") {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

func writeOwned(t *testing.T, dir, data string, uid int) {
	t.Helper()
	p := filepath.Join(dir, AgentStatusFile)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// TestRefusalErrorKeepsTheAgentsReason maps each reason the agent reports to the result's reason, with the
// agent's own message.
func TestRefusalErrorKeepsTheAgentsReason(t *testing.T) {
	for reason, want := range map[string]Reason{
		"config-invalid":        ReasonConfigInvalid,
		"agent-already-present": ReasonAgentAlreadyPresent,
		"port-in-use":           ReasonPortInUse,
		"port-not-permitted":    ReasonPortNotPermitted,
		"internal":              ReasonInternal,
		"something-new":         ReasonAgentStartFailed,
	} {
		err := refusalError(42, AgentStatus{State: AgentRefused, Reason: reason, Message: "the collector's words"})
		if ReasonOf(err) != want || !strings.Contains(err.Error(), "the collector's words") || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s: %v (reason %s), want %s", reason, err, ReasonOf(err), want)
		}
	}
}
