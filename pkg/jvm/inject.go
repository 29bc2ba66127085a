package jvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
)

// Defaults of an Injector.
const (
	// DefaultMinAge is how old a JVM must be before it is signalled: SIGQUIT to a JVM that is still starting can
	// kill it.
	DefaultMinAge = 10 * time.Second
	// DefaultAttachTimeout bounds the wait for the JVM's attach socket after SIGQUIT.
	DefaultAttachTimeout = 10 * time.Second
	// DefaultHTTPTimeout bounds the wait for the loaded agent's port to answer HTTP.
	DefaultHTTPTimeout = 15 * time.Second
	// DefaultTargetDir is the directory of the target's filesystem in which each injection creates its own
	// directory, AgentDirPrefix plus a random suffix, for the agent jar and config.
	DefaultTargetDir = "/tmp"
	// DefaultReloadTimeout bounds the wait, after a reconfiguration, for the agent to report its verdict on the
	// new config.
	DefaultReloadTimeout = 15 * time.Second
	// DefaultMetricsPath is the path the HTTP check requests.
	DefaultMetricsPath = "/metrics"
)

// markerPrefix names the file in the target's /tmp that records a loaded agent.
const markerPrefix = ".handlerkit-jmx-agent-"

// Option configures an Injector.
type Option func(*Injector) error

// WithMinAge sets how old a JVM must be before it is signalled; younger JVMs are waited for. Default:
// DefaultMinAge (10s). Zero disables the wait.
func WithMinAge(d time.Duration) Option {
	return func(in *Injector) error {
		if d < 0 {
			return fmt.Errorf("min age %s is negative", d)
		}
		in.minAge = d
		return nil
	}
}

// WithAttachTimeout sets how long to wait for the attach socket after SIGQUIT. Default: DefaultAttachTimeout.
func WithAttachTimeout(d time.Duration) Option {
	return func(in *Injector) error {
		if d <= 0 {
			return fmt.Errorf("attach timeout %s is not positive", d)
		}
		in.attachTimeout = d
		return nil
	}
}

// WithHTTPTimeout sets how long to wait for the agent's port to answer HTTP after loading. Default:
// DefaultHTTPTimeout. Zero disables the HTTP check.
func WithHTTPTimeout(d time.Duration) Option {
	return func(in *Injector) error {
		if d < 0 {
			return fmt.Errorf("http timeout %s is negative", d)
		}
		in.httpTimeout = d
		return nil
	}
}

// WithReloadTimeout sets how long Reconfigure (and Inject, for a JVM injected before with another config) waits
// for the agent to report its verdict on a new config. Default: DefaultReloadTimeout.
func WithReloadTimeout(d time.Duration) Option {
	return func(in *Injector) error {
		if d <= 0 {
			return fmt.Errorf("reload timeout %s is not positive", d)
		}
		in.reloadTimeout = d
		return nil
	}
}

// WithTargetDir sets the absolute directory, in the target's filesystem, in which each injection creates a new
// directory (AgentDirPrefix plus a random suffix) for the agent jar and config. Every directory on the way must
// be one that only root or the JVM's user can change (a sticky directory such as /tmp qualifies, and so does
// the root of the pod's own emptyDir volume); a symbolic link on the way is followed inside the JVM's root when
// root or the JVM's user made it, and the copies get the resolved path. Otherwise the injection fails with
// ReasonCopyFailed. Default: DefaultTargetDir.
func WithTargetDir(dir string) Option {
	return func(in *Injector) error {
		if !path.IsAbs(dir) {
			return fmt.Errorf("target dir %q is not absolute", dir)
		}
		in.targetDir = path.Clean(dir)
		return nil
	}
}

// WithExtraConfigKeys accepts more top-level exporter configuration keys than ExporterConfigKeys, for exporter
// versions newer than this package.
func WithExtraConfigKeys(keys ...string) Option {
	return func(in *Injector) error {
		in.extraKeys = append(in.extraKeys, keys...)
		return nil
	}
}

// WithWait makes Inject inject as soon as it is safe instead of refusing a JVM that is still starting: for up to
// d from the start of each Inject, a pid that is not a JVM yet (the java launcher has not loaded libjvm.so) is
// inspected again, and a JVM that has neither its attach socket nor a SIGQUIT handler yet is looked at again,
// with backoff from 50ms to 1s, until it has one of them; only then is it refused (ReasonNotJVM,
// ReasonSignalNotHandled). A JVM that catches SIGQUIT (SigCgt) has HotSpot's handler installed, and a SIGQUIT
// that arrives before its Signal Dispatcher thread runs is queued for it, so it is safe to signal; use it with
// WithMinAge(0). Default: 0, no waiting.
func WithWait(d time.Duration) Option {
	return func(in *Injector) error {
		if d < 0 {
			return fmt.Errorf("wait %s is negative", d)
		}
		in.wait = d
		return nil
	}
}

// WithContainer limits the Injector to the processes of container c: Inject and Reconfigure refuse a pid that
// is not one of its processes with ReasonContainerNotFound before reading anything else of it. Default: no
// limit.
func WithContainer(c *Container) Option {
	return func(in *Injector) error {
		in.container = c
		return nil
	}
}

// Backoff of WithWait's polling.
const (
	waitPollMin = 50 * time.Millisecond
	waitPollMax = time.Second
)

// Injector loads a java agent into running JVMs, checking first everything that would otherwise hurt the JVM.
type Injector struct {
	wait          time.Duration
	minAge        time.Duration
	attachTimeout time.Duration
	httpTimeout   time.Duration
	reloadTimeout time.Duration
	minHeadroom   int64
	targetDir     string
	extraKeys     []string
	container     *Container
	asUser        UserRunner
}

// NewInjector returns an Injector with the defaults documented on each option.
func NewInjector(opts ...Option) (*Injector, error) {
	in := &Injector{minAge: DefaultMinAge, attachTimeout: DefaultAttachTimeout, httpTimeout: DefaultHTTPTimeout,
		reloadTimeout: DefaultReloadTimeout, minHeadroom: DefaultMinMemoryHeadroom, targetDir: DefaultTargetDir}
	for _, o := range opts {
		if err := o(in); err != nil {
			return nil, fmt.Errorf("new injector: %w", err)
		}
	}
	return in, nil
}

// Agent is what to inject: a jmx_exporter-style java agent, its configuration and where it serves.
type Agent struct {
	// Jar is the agent jar on the injector's filesystem. When JarData is set, Jar only names the copy in the
	// JVM's filesystem (its last element; BundleAgentJar when empty).
	Jar string
	// Config is the exporter configuration (YAML) on the injector's filesystem. When ConfigData is set, Config
	// only names the copy (its last element; BundleConfig when empty).
	Config string
	// JarData and ConfigData, when not nil, are the agent jar and configuration themselves (from a Bundle or an
	// environment variable), used instead of reading Jar and Config.
	JarData, ConfigData []byte
	// Port is the TCP port the agent serves on, in the JVM's network namespace.
	Port int
	// Host is the address the agent binds; "" lets the agent bind every address, as jmx_exporter does.
	Host string
}

// Precheck runs the checks that do not depend on a JVM: the port is in range, the host is an IP address, the
// agent jar has an Agent-Class, and the configuration is a valid exporter configuration. Inject runs it too.
func (in *Injector) Precheck(a Agent) error {
	_, err := in.precheck(a)
	return err
}

// precheck is Precheck returning the jar and configuration it read, the bytes Inject copies.
func (in *Injector) precheck(a Agent) (agentFiles, error) {
	if a.Port < 1 || a.Port > 65535 {
		return agentFiles{}, &AttachError{Reason: ReasonInvalidRequest, Msg: fmt.Sprintf("port %d is out of range 1-65535", a.Port)}
	}
	if a.Host != "" && net.ParseIP(a.Host) == nil {
		return agentFiles{}, &AttachError{Reason: ReasonInvalidRequest, Msg: fmt.Sprintf("host %q is not an IP address", a.Host)}
	}
	return readAgentFiles(a, in.extraKeys)
}

// Inject loads agent a into the JVM pid and reports the result; it never returns a Go error, so that every
// outcome reaches the operator in the same shape. In order, it:
//
//  1. checks that pid is a JVM, the jar, the config, that the agent is not loaded already (marker in the
//     JVM's /tmp and a listener on the port: then a different config is given to it as Reconfigure does, in
//     the same run), that no jmx_exporter runs in it as -javaagent, that its container has room for the agent
//     under its memory limit (WithMinMemoryHeadroom), that the agent will be able to bind the port
//     (CheckPort), and that neither attach nor dynamic agent loading is disabled;
//  2. waits until the JVM is at least the minimum age, then checks that its attach listener runs or can be
//     started without killing it;
//  3. copies the jar and config into a new directory in the JVM's filesystem (see WithTargetDir), verifies
//     the copies and checks the port once more;
//  4. loads the agent over the attach protocol, reads the agent's verdict (AgentStatusFile: a refusal is an
//     error with the agent's reason and message, and no marker) and records the marker;
//  5. waits until the port listens (an agent that reported serving) or answers HTTP (an agent that writes no
//     status, such as jmx_exporter's own).
//
// Nothing is signalled before step 4, so a failed check leaves the JVM untouched. When the JVM did not load
// the agent the copies are removed; once it did, they stay for the JVM's lifetime.
func (in *Injector) Inject(ctx context.Context, pid int, a Agent) InjectResult {
	res := InjectResult{PID: pid, Port: a.Port, Host: a.Host}
	fail := func(err error) InjectResult {
		res.Status = OutcomeError
		res.Reason = ReasonOf(err)
		res.Message = err.Error()
		return res
	}
	if in.container != nil && !in.container.Contains(pid) {
		return fail(notInContainer(in.container, pid))
	}
	var waitUntil time.Time
	if in.wait > 0 {
		waitUntil = time.Now().Add(in.wait)
	}
	j, err := in.inspectWaiting(ctx, pid, waitUntil)
	if err != nil {
		return fail(err)
	}
	res.NSPID, res.MainClass, res.JavaVersion, res.StartedAt = j.NSPID, j.MainClass, j.JavaVersion, j.StartTime
	files, err := in.precheck(a)
	if err != nil {
		return fail(err)
	}
	if user, ok := in.otherUser(j); ok {
		return in.runAsUser(ctx, UserRequest{JVM: j, User: user, Agent: a, Jar: files.jar.data, Config: files.config.data}, res)
	}
	// From the marker check to the marker write, no other injection of this JVM may run.
	lock, err := lockJVM(ctx, j, in.lockWait())
	if err != nil {
		return fail(err)
	}
	defer lock.unlock()
	prev, hasMarker := readMarker(j)
	if hasMarker {
		res.AgentPath, res.ConfigPath = prev.AgentPath, prev.ConfigPath
		return in.reportEarlierLoad(ctx, j, res, prev, files.config.data)
	}
	if err := in.checkBeforeSignal(j, a); err != nil {
		return fail(err)
	}
	if j.Age < in.minAge {
		if j, err = in.waitMinAge(ctx, j); err != nil {
			return fail(err)
		}
	}
	// Only now: a JVM younger than the minimum age may not have its SIGQUIT handler yet.
	if err := in.waitListenerReachable(ctx, j, waitUntil); err != nil {
		return fail(err)
	}
	// The copies of JVMs that are gone go first, so that restarts do not pile them up (an emptyDir /tmp outlives
	// its container's processes, and one in memory counts against the pod's limit).
	in.removeDeadCopies(j)
	dir, paths, err := copyToTarget(pid, in.targetDir, j.FSUID, j.FSGID, files.jar, files.config, ownerRecord(j))
	if err != nil {
		if r := ReasonOf(err); r != ReasonRootInaccessible && r != ReasonProcessGone {
			err = &AttachError{Reason: ReasonCopyFailed, Msg: "place agent files", Err: err}
		}
		return fail(err)
	}
	defer dir.close()
	res.AgentPath, res.ConfigPath = paths[0], paths[1]
	discard := func(err error) InjectResult {
		_ = dir.remove()
		res.AgentPath, res.ConfigPath = "", ""
		return fail(err)
	}
	// The wait and the copy take time: look at the port again, as close to the load as possible.
	if err := CheckPort(j, a.Host, a.Port); err != nil {
		return discard(err)
	}
	opts := strconv.Itoa(a.Port) + ":" + res.ConfigPath
	if a.Host != "" {
		opts = hostPort(a.Host, a.Port) + ":" + res.ConfigPath
	}
	inUse, early, err := in.loadAgent(ctx, j, res.AgentPath, opts)
	// A JVM signalled the moment it could be (WithWait) may not have finished starting: it then refuses the load
	// before touching the agent, and is asked again, without a signal, until the wait ends.
	for delay := waitPollMin; early && !waitUntil.IsZero() && time.Now().Before(waitUntil); delay = min(delay*2, waitPollMax) {
		if serr := sleepCtx(ctx, min(delay, time.Until(waitUntil))); serr != nil {
			break
		}
		if verr := dir.verify(); verr != nil {
			return discard(&AttachError{Reason: ReasonCopyFailed, Msg: "verify agent files", Err: verr})
		}
		if perr := CheckPort(j, a.Host, a.Port); perr != nil {
			return discard(perr)
		}
		inUse, early, err = in.loadAgent(ctx, j, res.AgentPath, opts)
	}
	if err != nil && !inUse {
		return discard(err)
	}
	if err != nil {
		return fail(err)
	}
	// The project's agent reports what it made of the config before agentmain returns; jmx_exporter's own
	// agent writes nothing and is judged by its port answering HTTP.
	st, found, err := readAgentStatus(dir.fd, dir.dir(), j.FSUID)
	if err != nil {
		return fail(in.goneOr(j, &AttachError{Reason: ReasonInternal, Msg: "agent loaded, but its status cannot be trusted", Err: err}))
	}
	if found && st.State == AgentRefused {
		// Nothing serves, so no marker: the agent refuses nothing it has not started, and a later injection
		// with a config it accepts may load it again. The jar is on the JVM's class path: the copies stay.
		return fail(refusalError(pid, st))
	}
	if err := writeMarker(j, marker{Port: a.Port, AgentPath: res.AgentPath, ConfigPath: res.ConfigPath, StartTicks: j.StartTicks}); err != nil {
		return fail(&AttachError{Reason: ReasonInternal, Msg: "agent loaded, but recording it failed", Err: err})
	}
	lock.unlock() // the marker is written: another injection now finds it
	// A JVM that ends now is reported as soon as it ends, not after the checks time out.
	ctx, stop := watchExit(ctx, j)
	defer stop()
	if found {
		if want := configDigest(files.config.data); st.ConfigSHA256 != want {
			return fail(&AttachError{Reason: ReasonInternal, Msg: fmt.Sprintf(
				"the agent reports serving a config with SHA-256 %s, but the config copied has %s", st.ConfigSHA256, want)})
		}
		// The agent bound its port before it wrote "serving"; its HTTP server may require authentication or
		// TLS, so the port listening is the check.
		if err := waitListening(ctx, pid, a.Port, max(in.httpTimeout, time.Second)); err != nil {
			return fail(in.goneOr(j, err))
		}
		res.Status = OutcomeOK
		res.Message = fmt.Sprintf("agent loaded; serving on port %d (config SHA-256 %.12s)", a.Port, st.ConfigSHA256)
		return res
	}
	if in.httpTimeout > 0 {
		if err := CheckHTTP(ctx, pid, a.Host, a.Port, in.httpTimeout); err != nil {
			return fail(in.goneOr(j, err))
		}
	}
	res.Status = OutcomeOK
	res.Message = fmt.Sprintf("agent loaded; serving on port %d", a.Port)
	return res
}

// goneOr returns a process-gone error, saying how the JVM ended when /proc still tells, when JVM j ended (or
// ends within a second), and err otherwise: a JVM that dies after a load is reported as dead, not as a
// failed check.
func (in *Injector) goneOr(j JVM, err error) error {
	at := &attacher{jvm: j}
	if gone := at.goneError(); gone != nil {
		var ae *AttachError
		if errors.As(gone, &ae) {
			ae.Msg = strings.Replace(ae.Msg, "during the attach conversation", "after the agent was loaded", 1)
		}
		return gone
	}
	return err
}

// exitPoll is how often watchExit looks at the JVM.
const exitPoll = 100 * time.Millisecond

// watchExit returns a context that ends with ctx or when JVM j ends (its pid gone, reused or a zombie), and a
// function that stops the watch.
func watchExit(ctx context.Context, j JVM) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(exitPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if st, err := readStat(j.PID); err != nil || st.StartTicks != j.StartTicks || st.State == 'Z' || st.State == 'X' {
				cancel()
				return
			}
		}
	}()
	return ctx, cancel
}

// waitListening waits until some socket listens on port in the network namespace of pid, or timeout passes
// (ReasonHTTPCheckFailed).
func waitListening(ctx context.Context, pid, port int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for delay := 10 * time.Millisecond; ; delay = min(delay*2, 250*time.Millisecond) {
		ok, err := PortListening(pid, port)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if sleepCtx(ctx, delay) != nil {
			return &AttachError{Reason: ReasonHTTPCheckFailed, Msg: fmt.Sprintf(
				"the agent reports serving, but port %d does not listen within %s", port, timeout)}
		}
	}
}

// lockWait bounds the wait for another injection of the same JVM to finish: its age wait, its wait for the JVM
// to be ready, its attach and its load.
func (in *Injector) lockWait() time.Duration {
	return in.minAge + in.wait + 2*in.attachTimeout + replyTimeout + 30*time.Second
}

// inspectWaiting inspects pid; until waitUntil (when set) a process that is not a JVM yet, such as the java
// launcher before it loaded libjvm.so, is inspected again with backoff.
func (in *Injector) inspectWaiting(ctx context.Context, pid int, waitUntil time.Time) (JVM, error) {
	delay := waitPollMin
	for {
		j, err := Inspect(pid)
		if err == nil || waitUntil.IsZero() || ReasonOf(err) != ReasonNotJVM || time.Now().After(waitUntil) {
			return j, err
		}
		if err := sleepCtx(ctx, min(delay, time.Until(waitUntil))); err != nil {
			return j, &AttachError{Reason: ReasonNotJVM, Msg: fmt.Sprintf("pid %d is not a JVM and the wait was cancelled", pid), Err: err}
		}
		delay = min(delay*2, waitPollMax)
	}
}

// waitListenerReachable checks that the JVM's attach listener runs or can be started without killing it; until
// waitUntil (when set) a JVM that is still starting, with neither its socket nor a SIGQUIT handler, is looked at
// again with backoff.
func (in *Injector) waitListenerReachable(ctx context.Context, j JVM, waitUntil time.Time) error {
	at := &attacher{jvm: j}
	delay := waitPollMin
	start := time.Now()
	for {
		err := at.checkListenerReachable()
		if err == nil || waitUntil.IsZero() || ReasonOf(err) != ReasonSignalNotHandled {
			return err
		}
		if time.Now().After(waitUntil) {
			return &AttachError{Reason: ReasonSignalNotHandled, Msg: fmt.Sprintf(
				"pid %d still has no attach socket and no SIGQUIT handler after waiting %s; not signalled", j.PID, time.Since(start).Round(time.Millisecond))}
		}
		if err := sleepCtx(ctx, min(delay, time.Until(waitUntil))); err != nil {
			return &AttachError{Reason: ReasonSignalNotHandled, Msg: fmt.Sprintf(
				"pid %d has no attach socket and no SIGQUIT handler yet and the wait was cancelled; not signalled", j.PID), Err: err}
		}
		delay = min(delay*2, waitPollMax)
		if st, err := readStat(j.PID); err != nil || st.StartTicks != j.StartTicks || st.State == 'Z' {
			return &AttachError{Reason: ReasonProcessGone, Msg: fmt.Sprintf("pid %d ended while it was starting", j.PID), Err: ErrProcessGone}
		}
	}
}

// sleepCtx sleeps for d or until ctx ends, returning ctx's error then.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// reportEarlierLoad reports on a JVM whose marker says an agent was loaded into it before: when the port
// listens, already injected if its config file holds config, and otherwise config is given to it as
// Reconfigure would (OutcomeOK with a note, or ReasonConfigRejected); when the port is silent, an error, since
// an agent is never loaded twice.
func (in *Injector) reportEarlierLoad(ctx context.Context, j JVM, res InjectResult, prev marker, config []byte) InjectResult {
	if prev.Port != res.Port {
		res.Status, res.Reason = OutcomeError, ReasonNotListening
		res.Message = fmt.Sprintf("an agent was loaded into pid %d before on port %d; refusing to load another on port %d",
			res.PID, prev.Port, res.Port)
		return res
	}
	listening, err := PortListening(res.PID, res.Port)
	if err != nil {
		res.Status, res.Reason, res.Message = OutcomeError, ReasonOf(err), err.Error()
		return res
	}
	if !listening {
		res.Status, res.Reason = OutcomeError, ReasonNotListening
		res.Message = fmt.Sprintf("an agent was loaded into pid %d before but port %d does not listen; refusing to load it twice",
			res.PID, res.Port)
		return res
	}
	r := in.reconfigure(ctx, j, prev.ConfigPath, config, res)
	switch r.Status {
	case OutcomeUnchanged:
		r.Status = OutcomeAlreadyInjected
		r.Message = fmt.Sprintf("agent already loaded (port %d listening) with this config; not loaded again", res.Port)
	case OutcomeOK:
		r.Message = fmt.Sprintf("agent already loaded (port %d listening) with another config; reconfigured: %s", res.Port, r.Message)
		r.Note = strings.TrimSpace("reconfigured. " + r.Note)
	}
	return r
}

// checkBeforeSignal runs the checks that need the JVM but do not touch it and do not depend on its age: no
// exporter agent runs in it already, its container has room for the agent under its memory limit, the agent
// can bind its port, and the JVM accepts an agent over the attach protocol.
func (in *Injector) checkBeforeSignal(j JVM, a Agent) error {
	if err := checkNoExporterAgent(j); err != nil {
		return err
	}
	if err := checkMemoryHeadroom(j, in.minHeadroom); err != nil {
		return err
	}
	if err := CheckPort(j, a.Host, a.Port); err != nil {
		return err
	}
	return checkAttachAllowed(j)
}

// checkAttachAllowed refuses a JVM that disabled the attach mechanism or the dynamic loading of agents.
func checkAttachAllowed(j JVM) error {
	if j.AttachDisabled {
		return &AttachError{Reason: ReasonAttachDisabled, Msg: fmt.Sprintf(
			"pid %d runs with -XX:+DisableAttachMechanism; an agent cannot be loaded into it", j.PID)}
	}
	if j.DynamicAgentLoadingDisabled {
		return &AttachError{Reason: ReasonDynamicLoadingDisabled, Msg: fmt.Sprintf(
			"pid %d runs with -XX:-EnableDynamicAgentLoading; it refuses agents loaded while it runs (start it with -javaagent instead)", j.PID)}
	}
	return nil
}

// waitMinAge waits until the JVM is at least the minimum age, then inspects it again to make sure it is still
// the same process.
func (in *Injector) waitMinAge(ctx context.Context, j JVM) (JVM, error) {
	if j.Age >= in.minAge {
		return j, nil
	}
	t := time.NewTimer(in.minAge - j.Age)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return j, &AttachError{Reason: ReasonTooYoung, Msg: fmt.Sprintf(
			"pid %d is younger than %s and the wait was cancelled", j.PID, in.minAge), Err: ctx.Err()}
	case <-t.C:
	}
	again, err := Inspect(j.PID)
	if err != nil {
		return j, err
	}
	if again.StartTicks != j.StartTicks {
		return j, &AttachError{Reason: ReasonProcessGone, Msg: fmt.Sprintf("pid %d was reused while waiting", j.PID), Err: ErrProcessGone}
	}
	return again, nil
}

// LoadAgent loads the java agent jar (a path as the JVM sees it) with options into JVM j over the attach
// protocol ("load instrument false <jar>=<options>") and maps the reply to an error. It does none of Inject's
// pre-checks except refusing a JVM that disabled attach or dynamic agent loading, one that SIGQUIT would kill,
// and an over-long argument.
func (in *Injector) LoadAgent(ctx context.Context, j JVM, jar, options string) error {
	_, _, err := in.loadAgent(ctx, j, jar, options)
	return err
}

// loadAgent is LoadAgent that also reports, on failure, whether the JVM may be using the jar and config:
// false when the request never reached it, when it answered that it did not load the jar, or when it is gone;
// true when the jar is on its class path (agentmain failed) or the outcome is unknown (no complete reply). early
// reports a JVM that refused the load because it has not finished starting (see tooEarly).
func (in *Injector) loadAgent(ctx context.Context, j JVM, jar, options string) (inUse, early bool, err error) {
	arg := jar
	if options != "" {
		arg += "=" + options
	}
	if len(arg) > MaxArgLength {
		return false, false, &AttachError{Reason: ReasonArgsTooLong,
			Msg: fmt.Sprintf("agent argument is %d bytes, the JVM accepts at most %d", len(arg), MaxArgLength)}
	}
	at := &attacher{jvm: j, attachTimeout: in.attachTimeout}
	raw, sent, err := at.execute(ctx, "load", "instrument", "false", arg)
	if err != nil {
		return sent && ReasonOf(err) != ReasonProcessGone, false, err
	}
	reply, err := ParseReply("load", raw)
	if err != nil {
		return true, false, &AttachError{Reason: ReasonAgentLoadFailed, Msg: "attach reply", Err: err}
	}
	err = reply.Err()
	return err != nil && ReasonOf(err) == ReasonAgentStartFailed, err != nil && tooEarly(reply), err
}

// tooEarly reports a "load" refused because the JVM has not finished starting. Before it loads an agent jar,
// HotSpot's attach listener loads the java.instrument module through the boot module layer, which exists only
// once the JVM's initialisation (initPhase2) is done; before that the call throws a NullPointerException, which
// the listener reports with a failed completion status, and nothing of the agent has been touched. A failure
// of the agent itself (agentmain throwing) comes with status 0 and a return code instead.
func tooEarly(r Reply) bool {
	return r.Status != 0 && strings.HasPrefix(r.Message, "java.lang.NullPointerException")
}

type marker struct {
	Port       int    `json:"port"`
	AgentPath  string `json:"agentPath"`
	ConfigPath string `json:"configPath"`
	StartTicks uint64 `json:"startTicks"`
}

func markerPath(j JVM) string { return "/tmp/" + markerPrefix + strconv.Itoa(j.NSPID) + ".json" }

// readMarker returns the marker of an earlier injection into this very process (a marker left by an earlier
// process with the same nspid has another start time and is ignored, and so is one that neither root nor the
// JVM's user wrote: anyone can create files in /tmp).
func readMarker(j JVM) (marker, bool) {
	root, err := openTargetRoot(j.PID)
	if err != nil {
		return marker{}, false
	}
	defer root.Close()
	data, owner, err := root.readFileOwner(markerPath(j), 64*1024)
	if err != nil || (owner != 0 && owner != j.FSUID && owner != os.Geteuid()) {
		return marker{}, false
	}
	var m marker
	if json.Unmarshal(data, &m) != nil || m.StartTicks != j.StartTicks {
		return marker{}, false
	}
	return m, true
}

func writeMarker(j JVM, m marker) error {
	root, err := openTargetRoot(j.PID)
	if err != nil {
		return err
	}
	defer root.Close()
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = root.writeFile("/tmp", path.Base(markerPath(j)), data, j.FSUID, j.FSGID)
	return err
}

// reachableHost returns the address to connect to for an agent bound to host: loopback for "all addresses".
func reachableHost(host string) string {
	ip := net.ParseIP(host)
	switch {
	case ip == nil || ip.Equal(net.IPv4zero):
		return "127.0.0.1"
	case ip.Equal(net.IPv6unspecified):
		return "::1"
	}
	return host
}

func hostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// CheckHTTP waits until GET http://<host>:<port>/metrics answers 200 in the network namespace of pid, or timeout
// passes. An empty or unspecified host is checked on loopback. When pid is in another network namespace the
// connection is made from inside it.
func CheckHTTP(ctx context.Context, pid int, host string, port int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := hostPort(reachableHost(host), port)
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialInNetns(ctx, pid, addr)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true, Proxy: nil}}
	var last error
	delay := 20 * time.Millisecond
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+DefaultMetricsPath, nil)
		if err != nil {
			return &AttachError{Reason: ReasonHTTPCheckFailed, Msg: "build request", Err: err}
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("HTTP status %s", resp.Status)
		}
		last = err
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return &AttachError{Reason: ReasonHTTPCheckFailed, Msg: fmt.Sprintf(
				"agent loaded but http://%s%s did not answer 200 within %s", addr, DefaultMetricsPath, timeout), Err: last}
		case <-t.C:
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}

// Scrape fetches http://<host>:<port>/metrics from the network namespace of pid and returns the body. An empty
// or unspecified host is reached on loopback.
func Scrape(ctx context.Context, pid int, host string, port int) (string, error) {
	addr := hostPort(reachableHost(host), port)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialInNetns(ctx, pid, addr)
	}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+DefaultMetricsPath, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(bufio.NewReader(io.LimitReader(resp.Body, 16<<20)))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("scrape %s: HTTP status %s", addr, resp.Status)
	}
	return string(body), nil
}
