package inject

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/handlerkit/handlerkit/pkg/jvm"
)

func TestParseOutcome(t *testing.T) {
	ok := jvm.InjectResult{PID: 7, NSPID: 1, MainClass: "app.jar", Status: jvm.OutcomeOK, Port: 9404}
	bad := jvm.InjectResult{PID: 8, NSPID: 2, Status: jvm.OutcomeError, Reason: jvm.ReasonPortInUse, Message: "taken", Port: 9405}
	lines := jvm.FormatTerminationLog([]jvm.InjectResult{ok, bad})
	o, err := parseOutcome(lines, exitSomeFailed)
	if err != nil || len(o.Results) != 2 || o.Results[0].Port != 9404 || o.Results[1].Reason != jvm.ReasonPortInUse {
		t.Fatalf("outcome %+v, %v", o, err)
	}
	// Noise on stdout around the JSON lines is kept as detail, not lost.
	o, err = parseOutcome(append([]byte("warning: something\n"), lines...), 0)
	if err != nil || len(o.Results) != 2 || !strings.Contains(o.Detail, "warning") {
		t.Fatalf("outcome %+v, %v", o, err)
	}
	o, err = parseOutcome([]byte("jmx-attach: no JVM found\n"), exitNoJVM)
	if err != nil || !o.NoJVM {
		t.Fatalf("no JVM: %+v, %v", o, err)
	}
	// Refused before any JVM was touched: a result without results, not an
	// unknown outcome.
	o, err = parseOutcome([]byte("jmx-attach: config: unknown key rule\n"), exitInvalidArgs)
	if err != nil || len(o.Results) != 0 || !strings.Contains(o.Detail, "unknown key") {
		t.Fatalf("invalid args: %+v, %v", o, err)
	}
	// Anything else without a result is unknown: retry.
	if _, err := parseOutcome([]byte("killed"), 137); err == nil {
		t.Fatal("exit 137 without a result: no error")
	}
	if _, err := parseOutcome(nil, 0); err == nil {
		t.Fatal("exit 0 without a result: no error")
	}
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func TestEphemeralContainerNamesAreDeterministicPerContainerStart(t *testing.T) {
	a := InjectContainerPrefix("app", "containerd://aaaa")
	if a != InjectContainerPrefix("app", "containerd://aaaa") {
		t.Fatal("not deterministic")
	}
	if a == InjectContainerPrefix("app", "containerd://bbbb") || a == InjectContainerPrefix("web", "containerd://aaaa") {
		t.Fatal("another container start gets the same name")
	}
	cfg := ReconfigureContainerPrefix("app", "containerd://aaaa", []byte("rules: []"))
	if cfg == ReconfigureContainerPrefix("app", "containerd://aaaa", []byte("rules: [x]")) {
		t.Fatal("another config gets the same name")
	}
	for _, p := range []string{a, cfg} {
		name := p + "99"
		if len(name) > 63 || !dnsLabel.MatchString(name) {
			t.Errorf("%q is not a DNS label", name)
		}
	}
}

func TestLatestAttempt(t *testing.T) {
	prefix := InjectContainerPrefix("app", "id")
	pod := &corev1.Pod{}
	if _, n, _ := latestAttempt(pod, prefix); n != 0 {
		t.Fatalf("empty pod: attempt %d", n)
	}
	for _, n := range []string{"1", "2", "10"} {
		pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers,
			corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: prefix + n}})
	}
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers,
		corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger"}})
	pod.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{
		{Name: prefix + "1", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}},
		{Name: prefix + "10", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
	}
	name, n, running := latestAttempt(pod, prefix)
	if name != prefix+"10" || n != 10 || !running {
		t.Fatalf("latest %q %d %v", name, n, running)
	}
	pod.Status.EphemeralContainerStatuses[1].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}
	if _, _, running := latestAttempt(pod, prefix); running {
		t.Fatal("a terminated attempt counted as running")
	}
}

// baselineAddable are the capabilities the baseline Pod Security level lets
// a container add.
var baselineAddable = map[corev1.Capability]bool{"AUDIT_WRITE": true, "CHOWN": true, "DAC_OVERRIDE": true, "FOWNER": true,
	"FSETID": true, "KILL": true, "MKNOD": true, "NET_BIND_SERVICE": true, "SETFCAP": true, "SETGID": true, "SETPCAP": true,
	"SETUID": true, "SYS_CHROOT": true}

func TestSecurityContextIsTheLeastEachCaseNeeds(t *testing.T) {
	common := func(name string, sc *corev1.SecurityContext) {
		t.Helper()
		if *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
			sc.Privileged != nil || containsCap(sc.Capabilities.Add, "SYS_PTRACE") {
			t.Errorf("%s: %+v", name, sc)
		}
		for _, c := range sc.Capabilities.Add {
			if !baselineAddable[c] && name != "added beyond baseline" {
				t.Errorf("%s: adds %s, which baseline refuses", name, c)
			}
		}
	}
	// A known non-root user: that user, every capability dropped (restricted).
	sc := SecurityContext(Target{UID: ptr.To(int64(1001)), GID: ptr.To(int64(1002)), Capabilities: DefaultCapabilities})
	common("non-root", sc)
	if *sc.RunAsUser != 1001 || *sc.RunAsGroup != 1002 || !*sc.RunAsNonRoot || len(sc.Capabilities.Add) != 0 ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("non-root: %+v", sc)
	}
	for _, tc := range []struct {
		name       string
		target     Target
		drop, add  []corev1.Capability
		runAsGroup int64
	}{
		// A root JVM with the runtime's default set: nothing added, nothing dropped.
		{"root, default set", Target{UID: ptr.To(int64(0)), GID: ptr.To(int64(0)), Capabilities: ContainerCapabilities(nil)}, nil, nil, 0},
		// The user unknown: the same, relative to the defaults; never SYS_PTRACE.
		{"unknown, default set", Target{Capabilities: ContainerCapabilities(nil)}, nil, nil, 0},
		{"unknown, nothing known of the container", Target{}, nil, nil, 0},
		{"root, some dropped", Target{UID: ptr.To(int64(0)), GID: ptr.To(int64(5)),
			Capabilities: ContainerCapabilities(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW", "CAP_MKNOD", "SETUID"}}})},
			[]corev1.Capability{"MKNOD", "NET_RAW", "SETUID"}, nil, 5},
		{"root, all dropped", Target{UID: ptr.To(int64(0)), GID: ptr.To(int64(0)),
			Capabilities: ContainerCapabilities(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}})},
			[]corev1.Capability{"ALL"}, nil, 0},
		{"root, all dropped, one added", Target{UID: ptr.To(int64(0)), GID: ptr.To(int64(0)),
			Capabilities: ContainerCapabilities(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_BIND_SERVICE"}}})},
			[]corev1.Capability{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}, nil, 0},
		// Beyond baseline but without SYS_PTRACE: what the target added is
		// added (the namespace admitted it for the target), so a root JVM
		// holding it is reachable.
		{"added beyond baseline", Target{Capabilities: ContainerCapabilities(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}})},
			nil, []corev1.Capability{"NET_ADMIN"}, 0},
		// A target holding SYS_PTRACE cannot be reached without it, which is
		// never given: its other additions buy nothing, so none are made.
		{"added SYS_PTRACE", Target{Capabilities: ContainerCapabilities(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_PTRACE", "NET_ADMIN"}}})},
			nil, nil, 0},
		{"privileged", Target{Capabilities: ContainerCapabilities(&corev1.SecurityContext{Privileged: ptr.To(true)})},
			nil, nil, 0},
	} {
		sc := SecurityContext(tc.target)
		common(tc.name, sc)
		if *sc.RunAsUser != 0 || *sc.RunAsNonRoot || *sc.RunAsGroup != tc.runAsGroup ||
			!slices.Equal(sc.Capabilities.Drop, tc.drop) || !slices.Equal(sc.Capabilities.Add, tc.add) {
			t.Errorf("%s: runAs %d:%d, drop %v add %v; want drop %v add %v", tc.name, *sc.RunAsUser, *sc.RunAsGroup,
				sc.Capabilities.Drop, sc.Capabilities.Add, tc.drop, tc.add)
		}
	}
}

func TestBothStrategiesPassTheContainerID(t *testing.T) {
	const id = "containerd://0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tg := Target{ContainerID: id}
	for name, args := range map[string][]string{
		"inject":      injectArgs(tg, Request{Port: 9404}, true),
		"reconfigure": reconfigureArgs(tg, Request{}, false),
	} {
		i := slices.Index(args, "--container-id")
		if i < 0 || i+1 >= len(args) || args[i+1] != id {
			t.Errorf("%s: %q", name, args)
		}
	}
	if _, err := parseOutcome([]byte(`{"pid":0,"status":"error","reason":"container-not-found","message":"x"}`), exitNoContainer); !errors.Is(err, ErrContainerNotFound) {
		t.Errorf("exit 6: %v", err)
	}
}

func containsCap(list []corev1.Capability, c corev1.Capability) bool {
	for _, x := range list {
		if x == c {
			return true
		}
	}
	return false
}

func TestBundleIsWhatJmxAttachReads(t *testing.T) {
	b, err := bundle([]byte("jar bytes"), []byte("rules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := jvm.ReadBundle(bytes.NewReader(b), true)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.AgentJar) != "jar bytes" || string(got.Config) != "rules: []\n" {
		t.Fatalf("bundle %+v", got)
	}
	b, err = bundle(nil, []byte("rules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jvm.ReadBundle(bytes.NewReader(b), false); err != nil {
		t.Fatalf("config-only bundle: %v", err)
	}
}

func TestExecArgumentsAreNeverPartOfTheScript(t *testing.T) {
	// The scripts are constants; values (a pattern from a spec, here) arrive
	// as separate argv elements after the script, which sh gives the script
	// as "$0" and "$@" without parsing them.
	args := append([]string{"/bin/sh", "-c", runScript, "/tmp/x/jmx-attach"}, injectArgs(Target{}, Request{Port: 9404, JVMs: []string{"$(reboot)"}}, false)...)
	if args[2] != runScript || strings.Contains(runScript, "reboot") || !containsArg(args, "$(reboot)") {
		t.Fatalf("argv %q", args)
	}
}

func containsArg(args []string, a string) bool {
	for _, x := range args {
		if x == a {
			return true
		}
	}
	return false
}

func TestPoolRunsOneJobPerKeyAndBoundsParallelism(t *testing.T) {
	p := NewPool(2)
	var running, peak atomic.Int32
	release := make(chan struct{})
	var started sync.WaitGroup
	job := func(ctx context.Context) {
		n := running.Add(1)
		for {
			old := peak.Load()
			if n <= old || peak.CompareAndSwap(old, n) {
				break
			}
		}
		started.Done()
		<-release
		running.Add(-1)
	}
	started.Add(2)
	for _, k := range []string{"a", "b", "c"} {
		if !p.TryRun(context.Background(), k, job) {
			t.Fatalf("%s not started", k)
		}
	}
	if p.TryRun(context.Background(), "a", job) {
		t.Fatal("a second job for key a started while the first is queued or running")
	}
	started.Wait()
	// A deliberate pause, not a wait: it gives a third job the chance to start if the pool let it.
	time.Sleep(50 * time.Millisecond)
	if peak.Load() != 2 {
		t.Fatalf("peak %d, want 2", peak.Load())
	}
	started.Add(1)
	close(release)
	p.Wait()
	if p.Len() != 0 || p.Busy("a") {
		t.Fatal("jobs left")
	}
	// A cancelled context drops a job that waits for a slot.
	ctx, cancel := context.WithCancel(context.Background())
	block := make(chan struct{})
	p.TryRun(context.Background(), "x", func(context.Context) { <-block })
	p.TryRun(context.Background(), "y", func(context.Context) { <-block })
	ran := false
	p.TryRun(ctx, "z", func(context.Context) { ran = true })
	cancel()
	close(block)
	p.Wait()
	if ran {
		t.Fatal("a job whose context ended while queued ran")
	}
}

// TestPoolCallsThenOnceTheKeyIsFree: then runs after the job, when the key
// is free again (a look it triggers may start the next job of the key), and
// also for a job dropped while it waited.
func TestPoolCallsThenOnceTheKeyIsFree(t *testing.T) {
	p := NewPool(1)
	done := make(chan bool, 2)
	then := func(key string) func() {
		return func() { done <- !p.Busy(key) && p.TryRun(context.Background(), key, func(context.Context) {}) }
	}
	if !p.TryRunThen(context.Background(), "a", func(context.Context) {}, then("a")) {
		t.Fatal("a not started")
	}
	if free := <-done; !free {
		t.Fatal("then ran while key a was still busy")
	}
	block := make(chan struct{})
	p.TryRun(context.Background(), "x", func(context.Context) { <-block })
	ctx, cancel := context.WithCancel(context.Background())
	p.TryRunThen(ctx, "z", func(context.Context) { t.Error("a job whose context ended while queued ran") }, then("z"))
	cancel()
	if free := <-done; !free {
		t.Fatal("then of a dropped job ran while key z was still busy")
	}
	close(block)
	p.Wait()
}

// TestSameAttemptsCountsOnlyTheSameRequest checks what bounds the attempts
// of a container start: the earlier ephemeral containers that ran the very
// same command with the same config. Another config or command (a changed
// exporter) is a new request and is not held back by the old ones; other
// prefixes (another container start) never count.
func TestSameAttemptsCountsOnlyTheSameRequest(t *testing.T) {
	ec := func(name, cmd, env string) corev1.EphemeralContainer {
		return corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: name, Command: []string{"/jmx-attach", cmd}, Env: []corev1.EnvVar{{Name: ConfigEnv, Value: env}}}}
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{EphemeralContainers: []corev1.EphemeralContainer{
		ec("jmx-abc-1", "inject", "gzip+base64:A"),
		ec("jmx-abc-2", "inject", "gzip+base64:B"),
		ec("jmx-abc-3", "inject", "gzip+base64:A"),
		ec("jmx-abc-4", "reconfigure", "gzip+base64:A"),
		ec("jmx-xyz-1", "inject", "gzip+base64:A"),
	}}}
	for _, c := range []struct {
		cmd, env string
		want     int
	}{
		{"inject", "gzip+base64:A", 2},
		{"inject", "gzip+base64:B", 1},
		{"inject", "gzip+base64:C", 0},
		{"reconfigure", "gzip+base64:A", 1},
	} {
		if got := sameAttempts(pod, "jmx-abc-", []string{"/jmx-attach", c.cmd}, c.env); got != c.want {
			t.Errorf("%s with %s: %d earlier attempts, want %d", c.cmd, c.env, got, c.want)
		}
	}
}
