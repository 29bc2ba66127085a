package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// runtimeDefaultCaps is the capability set containerd, CRI-O and Docker give a container that does not change
// it (pkg/inject.DefaultCapabilities), as setpriv spells it. It has no SYS_PTRACE.
var runtimeDefaultCaps = []string{"audit_write", "chown", "dac_override", "fowner", "fsetid", "kill", "mknod",
	"net_bind_service", "net_raw", "setfcap", "setgid", "setpcap", "setuid", "sys_chroot"}

// rootWith is the setpriv prefix that runs a command as root whose capabilities (bounding set, and so
// permitted and effective after exec) are exactly caps, with no_new_privs, as an ephemeral container of
// root with those capabilities runs.
func rootWith(t *testing.T, caps ...string) []string {
	t.Helper()
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) is required: %v", err)
	}
	bounding := "-all"
	for _, c := range caps {
		bounding += ",+" + c
	}
	return []string{setpriv, "--reuid", "0", "--regid", "0", "--clear-groups", "--inh-caps=-all",
		"--bounding-set=" + bounding, "--no-new-privs"}
}

// capsOf returns the capability masks (CapPrm, CapEff, CapBnd) of a command run under prefix.
func capsOf(t *testing.T, prefix []string) string {
	t.Helper()
	out, stderr, code := runCommand(t, append(prefix, "cat", "/proc/self/status")...)
	if code != 0 {
		t.Fatalf("cat under setpriv: exit %d: %s", code, stderr)
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "CapPrm") || strings.HasPrefix(l, "CapEff") || strings.HasPrefix(l, "CapBnd") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, " ")
}

// TestRootWithTheDefaultCapabilitiesInjectsAJVMOfAnotherUserAsThatUser runs jmx-attach as root with exactly
// the runtime's default capabilities (no SYS_PTRACE), and then with SETUID and SETGID alone, against a real
// JVM of uid 1000: the kernel would not let root read that JVM's /proc entries without SYS_PTRACE, so
// jmx-attach lists it through the JVM's filesystem ids and injects it by running itself again as uid 1000,
// whose copies belong to uid 1000 from the start (no CHOWN, DAC_OVERRIDE or FOWNER used). Reconfigure works
// the same way. Without SETUID and SETGID the JVM is reported unreachable (proc-access-denied) with the reason
// and left untouched.
func TestRootWithTheDefaultCapabilitiesInjectsAJVMOfAnotherUserAsThatUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	t.Parallel()
	const uid, gid = 1000, 1000
	jar := shippedAgentCopy(t)
	env := []string{"JMX_CONFIG=rules:\n- pattern: \".*\"\n"}

	for _, tc := range []struct {
		name string
		caps []string
	}{
		{"the runtime's default set", runtimeDefaultCaps},
		{"SETUID and SETGID alone", []string{"setuid", "setgid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jv := jvmtest.StartJVM(t, jvmtest.Options{App: app, Credential: &syscall.Credential{Uid: uid, Gid: gid}})
			prefix := rootWith(t, tc.caps...)
			if c := capsOf(t, prefix); strings.Contains(c, "CapEff:\t000001ffffffffff") {
				t.Fatalf("setpriv did not limit the capabilities: %s", c)
			}
			// list: the JVM of uid 1000 is seen.
			out, stderr, code := runWith(t, nil, nil, append(append([]string{}, prefix...), binary, "list", "--json")...)
			if code != exitOK {
				t.Fatalf("list: exit %d: %s", code, stderr)
			}
			var listed []jvm.JVM
			if err := json.Unmarshal([]byte(out), &listed); err != nil {
				t.Fatal(err)
			}
			found := false
			for _, j := range listed {
				found = found || (j.PID == jv.Pid && j.UID == uid)
			}
			if !found {
				t.Fatalf("list does not show pid %d of uid %d: %s", jv.Pid, uid, out)
			}

			port := freePort(t)
			out, stderr, code = runWith(t, nil, env, append(append([]string{}, prefix...), binary, "inject", "--agent", jar,
				"--config-env", "JMX_CONFIG", "--port", strconv.Itoa(port), "--host", "127.0.0.1", "--pid", strconv.Itoa(jv.Pid),
				"--min-age", "0s", "--json", "--termination-log", "")...)
			if code != exitOK {
				t.Fatalf("inject: exit %d\nstdout: %s\nstderr: %s\njvm: %s", code, out, stderr, jv.Output())
			}
			res := parseLines(t, out)[0]
			removeCopies(t, res)
			if res.PID != jv.Pid || res.Status != jvm.OutcomeOK {
				t.Fatalf("result %+v", res)
			}
			dir := filepath.Join("/proc", strconv.Itoa(jv.Pid), "root", filepath.Dir(res.AgentPath))
			for _, p := range []string{dir, filepath.Join(dir, filepath.Base(res.AgentPath)), filepath.Join(dir, filepath.Base(res.ConfigPath))} {
				var st syscall.Stat_t
				if err := syscall.Stat(p, &st); err != nil || st.Uid != uid || st.Gid != gid {
					t.Errorf("%s: %v, owner %d:%d; want the JVM's user from the start", p, err, st.Uid, st.Gid)
				}
			}
			if body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", res.Port)); !strings.Contains(body, "jvm_memory") {
				t.Fatalf("metrics: %s", body)
			}
			out, stderr, code = runWith(t, nil, []string{"JMX_CONFIG=lowercaseOutputName: true\nrules:\n- pattern: \".*\"\n"},
				append(append([]string{}, prefix...), binary, "reconfigure", "--config-env", "JMX_CONFIG", "--pid", strconv.Itoa(jv.Pid),
					"--json", "--termination-log", "")...)
			if rc := parseLines(t, out)[0]; code != exitOK || rc.Status != jvm.OutcomeOK {
				t.Fatalf("reconfigure: exit %d\nstdout: %s\nstderr: %s", code, out, stderr)
			}
		})
	}

	t.Run("without SETUID and SETGID", func(t *testing.T) {
		other := jvmtest.StartJVM(t, jvmtest.Options{App: app, Credential: &syscall.Credential{Uid: uid, Gid: gid}})
		caps := []string{}
		for _, c := range runtimeDefaultCaps {
			if c != "setuid" && c != "setgid" {
				caps = append(caps, c)
			}
		}
		out, stderr, code := runWith(t, nil, env, append(rootWith(t, caps...), binary, "inject", "--agent", jar,
			"--config-env", "JMX_CONFIG", "--port", strconv.Itoa(freePort(t)), "--host", "127.0.0.1", "--pid", strconv.Itoa(other.Pid),
			"--min-age", "0s", "--json", "--termination-log", "")...)
		if code != exitFailed {
			t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitFailed, out, stderr)
		}
		res := parseLines(t, out)[0]
		if res.Reason != jvm.ReasonAccessDenied || !strings.Contains(res.Message, "CAP_SETUID") {
			t.Fatalf("result %+v, want %s naming CAP_SETUID", res, jvm.ReasonAccessDenied)
		}
		if jvmtest.AttachListenerStarted(other.Pid) || !other.Alive() {
			t.Fatalf("JVM was signalled (socket exists) or died (alive=%v)", other.Alive())
		}
	})
}
