package jvm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// exitLaterAgent is an agent whose agentmain returns normally and ends the JVM a moment later, as an
// application that dies right after a load would.
const exitLaterAgent = `package exitlater;

public final class Agent {
    public static void agentmain(String args) {
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(300);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            System.exit(3);
        });
        t.setDaemon(true);
        t.start();
    }
}
`

// TestJVMThatEndsAfterTheLoadIsProcessGone loads an agent that returns and then ends the JVM: the result is
// process-gone, saying the JVM ended after the agent was loaded, not a failed HTTP check, so that the operator
// counts a dead JVM.
func TestJVMThatEndsAfterTheLoadIsProcessGone(t *testing.T) {
	t.Parallel()
	needJava(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src", "exitlater", "Agent.java")
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte(exitLaterAgent), 0o644); err != nil {
		t.Fatal(err)
	}
	classes := filepath.Join(dir, "classes")
	if out, err := exec.Command("javac", "--release", "8", "-d", classes, src).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v: %s", err, out)
	}
	jar := filepath.Join(dir, "exit-later.jar")
	if err := jvmtest.WriteJar(jar, classes, map[string]string{"Agent-Class": "exitlater.Agent"}); err != nil {
		t.Fatal(err)
	}
	jv, _ := startInspected(t)
	res := newTestInjector(t, WithTargetDir(testTargetDir(t))).Inject(t.Context(), jv.Pid, Agent{Jar: jar, Config: testConfig, Port: freePort(t), Host: "127.0.0.1"})
	if res.Status != OutcomeError || res.Reason != ReasonProcessGone || !strings.Contains(res.Message, "after the agent was loaded") {
		t.Fatalf("result %+v, want %s after the load", res, ReasonProcessGone)
	}
	<-jv.Exited()
}
