package jvm

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// shippedAgentJar returns the project's agent jar (jvmtest.AgentJar), the one the image ships, built from
// agent/ on first use.
func shippedAgentJar(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	jar, err := jvmtest.AgentJar(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return jar
}

// exporterJar returns the real upstream jmx_prometheus_javaagent jar (jvmtest.JMXExporterVersion), for the tests
// whose point is the upstream agent: one already in a JVM, one that keeps no status file.
func exporterJar(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	jar, err := jvmtest.JMXExporterJar(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return jar
}

// Configs of the real exporter: the first exports every MBean attribute under its default name, the second
// lowercases the names, which a scrape shows at once.
const (
	exporterConfigA = "rules:\n- pattern: \".*\"\n"
	exporterConfigB = "lowercaseOutputName: true\nrules:\n- pattern: \".*\"\n"
)

var reloadSuccess = regexp.MustCompile(`(?m)^jmx_config_reload_success_total(?:\{[^}]*\})? ([0-9.eE+]+)$`)

// scrapeReal scrapes the real exporter on loopback until it answers, and returns the body.
func scrapeReal(t *testing.T, pid, port int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // only bounds a hung exporter
	defer cancel()
	for {
		body, err := Scrape(ctx, pid, "127.0.0.1", port)
		if err == nil {
			return body
		}
		select {
		case <-ctx.Done():
			t.Fatalf("scrape port %d: %v", port, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func reloadCount(t *testing.T, body string) float64 {
	t.Helper()
	m := reloadSuccess.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no jmx_config_reload_success_total in the scrape:\n%s", head(body, 3000))
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func head(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// TestReconfigureRealExporterReloads loads the upstream jmx_exporter 1.0.1, which keeps no status file (so
// Reconfigure behaves as it did before the project's agent: ok once the file is written), replaces its config
// with Reconfigure, and checks at the next scrapes that the exporter reloaded it (its reload counter went up)
// and uses it (names lowercased), then that the same config again is left unchanged and a bad config never
// reaches the file.
func TestReconfigureRealExporterReloads(t *testing.T) {
	t.Parallel()
	needJava(t)
	jar := exporterJar(t)
	cfgDir := t.TempDir()
	cfgA := filepath.Join(cfgDir, "config.yaml")
	if err := os.WriteFile(cfgA, []byte(exporterConfigA), 0o644); err != nil {
		t.Fatal(err)
	}
	jv, _ := startInspected(t)
	port := freePort(t)
	in := newTestInjector(t, WithTargetDir(testTargetDir(t)))
	res := in.Inject(context.Background(), jv.Pid, Agent{Jar: jar, Config: cfgA, Port: port, Host: "127.0.0.1"})
	requireOK(t, res)
	before := scrapeReal(t, jv.Pid, port)
	if !strings.Contains(before, "java_lang_Memory_HeapMemoryUsage_used") {
		t.Fatalf("config A not in effect:\n%s", head(before, 3000))
	}
	count := reloadCount(t, before)

	bad := in.Reconfigure(context.Background(), jv.Pid, []byte("rule:\n- pattern: x\n"))
	if bad.Reason != ReasonConfigInvalid {
		t.Fatalf("bad config: %+v", bad)
	}
	if got, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(jv.Pid), "root", res.ConfigPath)); string(got) != exporterConfigA {
		t.Fatalf("the config file changed after a refused reconfigure: %q", got)
	}

	time.Sleep(20 * time.Millisecond) // deliberate: the exporter compares modification times in milliseconds
	rc := in.Reconfigure(context.Background(), jv.Pid, []byte(exporterConfigB))
	if rc.Status != OutcomeOK || rc.Port != port || rc.ConfigPath != res.ConfigPath {
		t.Fatalf("reconfigure: %+v", rc)
	}
	// The exporter reloads while it collects, and the reload counter may be collected before it in the same
	// scrape: look until both show.
	var after string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		after = scrapeReal(t, jv.Pid, port)
		if reloadCount(t, after) > count {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jmx_config_reload_success_total did not go above %v after reconfigure:\n%s", count, head(after, 3000))
		}
	}
	after = scrapeReal(t, jv.Pid, port)
	if !strings.Contains(after, "java_lang_memory_heapmemoryusage_used") || strings.Contains(after, "java_lang_Memory_HeapMemoryUsage_used") {
		t.Fatalf("config B not in effect after reconfigure:\n%s", head(after, 3000))
	}
	st, err := os.Stat(filepath.Join("/proc", strconv.Itoa(jv.Pid), "root", rc.ConfigPath))
	if err != nil || st.Mode().Perm() != 0o444 {
		t.Fatalf("new config file: %v %v", st, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(filepath.Join("/proc", strconv.Itoa(jv.Pid), "root", rc.ConfigPath)))
	if len(entries) != 3 {
		t.Fatalf("the agent directory holds %d entries, want the jar, the config and the owner record", len(entries))
	}

	same := in.Reconfigure(context.Background(), jv.Pid, []byte(exporterConfigB))
	if same.Status != OutcomeUnchanged || !same.OK() {
		t.Fatalf("same config again: %+v", same)
	}
	if !jv.Alive() {
		t.Fatalf("JVM died: %s", jv.Output())
	}
}

func TestReconfigureWithoutInjectionIsNotInjected(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv, _ := startInspected(t)
	res := newTestInjector(t).Reconfigure(context.Background(), jv.Pid, []byte(exporterConfigA))
	if res.Reason != ReasonNotInjected {
		t.Fatalf("result %+v, want %s", res, ReasonNotInjected)
	}
	assertUntouched(t, jv)
}

// TestReconfigureRefusesAConfigPathOutsideAnAgentDirectory forges a marker that names a file elsewhere: the file
// is not touched.
func TestReconfigureRefusesAConfigPathOutsideAnAgentDirectory(t *testing.T) {
	t.Parallel()
	needJava(t)
	jv, j := startInspected(t)
	victim := filepath.Join(testTargetDir(t), "config.yaml")
	if err := os.WriteFile(victim, []byte("x: 1\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := writeMarker(j, marker{Port: 1, AgentPath: "/x.jar", ConfigPath: victim, StartTicks: j.StartTicks}); err != nil {
		t.Fatal(err)
	}
	res := newTestInjector(t).Reconfigure(context.Background(), jv.Pid, []byte(exporterConfigA))
	if res.Reason != ReasonCopyFailed {
		t.Fatalf("result %+v, want %s", res, ReasonCopyFailed)
	}
	if got, _ := os.ReadFile(victim); string(got) != "x: 1\n" {
		t.Fatalf("victim file changed: %q", got)
	}
}

// TestShippedAgentReportsItsVerdictOnEveryConfig loads the project's agent and checks that every result tells
// what the agent did: the load reports the agent serving the config copied; a reconfiguration it applies is ok
// and in effect at the next scrape; one it refuses (an unclosed regex group) is config-rejected with the
// collector's message while the old config stays in force, and so is the same config again; a changed
// httpServer section is ok with a note that it takes effect at the next start; and inject with another config
// into the JVM injected before reconfigures it in the same run, while the same config again is
// already-injected.
func TestShippedAgentReportsItsVerdictOnEveryConfig(t *testing.T) {
	t.Parallel()
	needJava(t)
	jar := shippedAgentJar(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(exporterConfigA), 0o644); err != nil {
		t.Fatal(err)
	}
	jv, _ := startInspected(t)
	port := freePort(t)
	in := newTestInjector(t, WithTargetDir(testTargetDir(t)))
	res := in.Inject(t.Context(), jv.Pid, Agent{Jar: jar, Config: cfg, Port: port, Host: "127.0.0.1"})
	requireOK(t, res)
	if !strings.Contains(res.Message, "config SHA-256 "+configDigest([]byte(exporterConfigA))[:12]) {
		t.Fatalf("the load's result does not come from the agent's status: %+v", res)
	}
	if body := scrapeReal(t, jv.Pid, port); !strings.Contains(body, "java_lang_Memory_HeapMemoryUsage_used") {
		t.Fatalf("config A not in effect:\n%s", head(body, 2000))
	}

	rc := in.Reconfigure(t.Context(), jv.Pid, []byte(exporterConfigB))
	if rc.Status != OutcomeOK || rc.Note != "" {
		t.Fatalf("reconfigure to B: %+v", rc)
	}
	if body := scrapeReal(t, jv.Pid, port); !strings.Contains(body, "java_lang_memory_heapmemoryusage_used") {
		t.Fatalf("config B not in effect right after an ok reconfigure:\n%s", head(body, 2000))
	}

	bad := "rules:\n- pattern: \"java.lang<type=(Memory>\"\n"
	for i := range 2 {
		rc = in.Reconfigure(t.Context(), jv.Pid, []byte(bad))
		if rc.Status != OutcomeError || rc.Reason != ReasonConfigRejected || !strings.Contains(rc.Message, "Unclosed group") {
			t.Fatalf("reconfigure to an unclosed group (attempt %d): %+v, want %s with the collector's message", i+1, rc, ReasonConfigRejected)
		}
	}
	if body := scrapeReal(t, jv.Pid, port); !strings.Contains(body, "java_lang_memory_heapmemoryusage_used") {
		t.Fatalf("config B no longer in effect after a rejected reconfigure:\n%s", head(body, 2000))
	}

	withHTTP := exporterConfigB + "httpServer:\n  threads:\n    minimum: 1\n    maximum: 4\n    keepAliveTime: 120\n"
	rc = in.Reconfigure(t.Context(), jv.Pid, []byte(withHTTP))
	if rc.Status != OutcomeOK || !strings.Contains(rc.Note, "httpServer") {
		t.Fatalf("reconfigure with a new httpServer section: %+v, want ok with a note", rc)
	}

	res = in.Inject(t.Context(), jv.Pid, Agent{Jar: jar, Config: cfg, Port: port, Host: "127.0.0.1"})
	if res.Status != OutcomeOK || !strings.HasPrefix(res.Note, "reconfigured") {
		t.Fatalf("inject config A into the JVM serving another: %+v, want ok, reconfigured", res)
	}
	if body := scrapeReal(t, jv.Pid, port); !strings.Contains(body, "java_lang_Memory_HeapMemoryUsage_used") {
		t.Fatalf("config A not in effect after inject reconfigured:\n%s", head(body, 2000))
	}
	res = in.Inject(t.Context(), jv.Pid, Agent{Jar: jar, Config: cfg, Port: port, Host: "127.0.0.1"})
	if res.Status != OutcomeAlreadyInjected {
		t.Fatalf("inject the same config again: %+v", res)
	}
	if got := strings.Count(jv.Output(), jvmtest.AgentLinePrefix); got != 1 || !jv.Alive() {
		t.Fatalf("the agent was loaded %d times (alive=%v):\n%s", got, jv.Alive(), jv.Output())
	}
}
