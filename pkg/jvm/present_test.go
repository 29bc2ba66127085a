package jvm

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

func TestJavaAgentsReadsEveryJavaagentOption(t *testing.T) {
	got := javaAgents([]string{"-Xmx1g", "-javaagent:/opt/a.jar=9404:/c.yaml", "-javaagent:b.jar", "-javaagent:", "-agentlib:jdwp=x"})
	if strings.Join(got, ",") != "/opt/a.jar,b.jar" {
		t.Fatalf("javaAgents = %q", got)
	}
}

// TestJVMStartedWithJMXExporterIsRefusedUntouched starts JVMs that run the real jmx_exporter 1.0.1 as
// -javaagent, named in each place the JVM reads options (the command line, JAVA_TOOL_OPTIONS and
// JDK_JAVA_OPTIONS), under its own name and renamed (found by its manifest), and checks that each is refused
// with agent-already-present before any signal, and lives on.
func TestJVMStartedWithJMXExporterIsRefusedUntouched(t *testing.T) {
	t.Parallel()
	needJava(t)
	upstream := exporterJar(t)
	data, err := os.ReadFile(upstream)
	if err != nil {
		t.Fatal(err)
	}
	dir := testTargetDir(t)
	renamed := filepath.Join(dir, "metrics.jar")
	if err := os.WriteFile(renamed, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts jvmtest.Options
	}{
		{"command line", jvmtest.Options{JVMArgs: []string{"-javaagent:" + upstream + "=127.0.0.1:PORT:" + testConfig}}},
		{"JAVA_TOOL_OPTIONS renamed", jvmtest.Options{Env: []string{"JAVA_TOOL_OPTIONS=-javaagent:" + renamed + "=127.0.0.1:PORT:" + testConfig}}},
		{"JDK_JAVA_OPTIONS renamed, relative", jvmtest.Options{Env: []string{"JDK_JAVA_OPTIONS=-javaagent:metrics.jar=127.0.0.1:PORT:" + testConfig},
			Files: map[string][]byte{"metrics.jar": data}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			exporterPort := strconv.Itoa(freePort(t))
			for i := range tc.opts.JVMArgs {
				tc.opts.JVMArgs[i] = strings.Replace(tc.opts.JVMArgs[i], "PORT", exporterPort, 1)
			}
			for i := range tc.opts.Env {
				tc.opts.Env[i] = strings.Replace(tc.opts.Env[i], "PORT", exporterPort, 1)
			}
			tc.opts.App = testApp
			jv := jvmtest.StartJVM(t, tc.opts)
			res := newTestInjector(t, WithTargetDir(testTargetDir(t))).Inject(t.Context(), jv.Pid, loopbackAgent(freePort(t)))
			if res.Status != OutcomeError || res.Reason != ReasonAgentAlreadyPresent {
				t.Fatalf("result %+v, want %s", res, ReasonAgentAlreadyPresent)
			}
			assertUntouched(t, jv)
			port, _ := strconv.Atoi(exporterPort)
			if body := scrapeReal(t, jv.Pid, port); !strings.Contains(body, "jvm_memory") {
				t.Fatalf("the JVM's own exporter does not serve:\n%s", head(body, 2000))
			}
		})
	}
}

// TestRootErrorsAreTheirOwnReason checks how a failure to open /proc/<pid>/root is classified: a process that
// is gone is process-gone, and anything else root-inaccessible, not copy-failed, so that the operator can tell
// a helper that will never reach the JVM's filesystem from a /tmp that is not writable.
func TestRootErrorsAreTheirOwnReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Reason
	}{
		{unix.ENOENT, ReasonProcessGone},
		{unix.ESRCH, ReasonProcessGone},
		{unix.EACCES, ReasonRootInaccessible},
		{unix.EPERM, ReasonRootInaccessible},
		{unix.ENOTDIR, ReasonRootInaccessible},
	} {
		if got := ReasonOf(rootError(1, tc.err)); got != tc.want {
			t.Errorf("%v: reason %s, want %s", tc.err, got, tc.want)
		}
	}
	// A pid that never existed: Inspect fails first, but the root itself is classified the same way.
	if _, err := openTargetRoot(1 << 30); ReasonOf(err) != ReasonProcessGone {
		t.Errorf("missing pid: %v", err)
	}
}
