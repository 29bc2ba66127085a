// Command jmx-attach finds the JVMs running on a machine or in a pod and loads a java agent (the Prometheus
// jmx_exporter) into them over the HotSpot attach protocol. It is one static binary: the target container needs
// no shell, JDK or writable /opt. Build it with CGO_ENABLED=0.
//
//	jmx-attach list [--json]
//	jmx-attach inject --agent JAR --config FILE --port N[,N...] (--pid P | --all) [--json]
//
// Exit codes are listed in the help text and docs/jmx-attach.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/handlerkit/handlerkit/pkg/jvm"
)

// Exit codes.
const (
	exitOK          = 0 // every JVM injected or already injected; list succeeded
	exitFailed      = 1 // at least one JVM failed; see its result line
	exitUsage       = 2 // bad command line
	exitNoJVM       = 3 // --all found no JVM
	exitBadAgent    = 4 // the agent jar or config is invalid; no JVM was touched
	exitListFailure = 5 // /proc could not be read
)

// defaultTerminationLog is where Kubernetes reads a container's termination message.
const defaultTerminationLog = "/dev/termination-log"

// maxTerminationLog is the size Kubernetes keeps of a termination message.
const maxTerminationLog = 4096

const usageText = `jmx-attach finds running JVMs and loads a java agent (the Prometheus jmx_exporter) into them, in pure Go.

Usage:
  jmx-attach list [--json]
  jmx-attach inject --agent JAR --config FILE --port N[,N...] (--pid P | --all) [flags]
  jmx-attach help [command]

Commands:
  list     list the JVMs visible from here (found through /proc, not hsperfdata)
  inject   check, copy and load the agent into JVMs, then check that the port answers HTTP

Exit codes:
  0  success: every JVM was injected or already had the agent (inject), or the list was printed (list)
  1  at least one JVM failed; its result line says why (reason field)
  2  bad command line
  3  inject --all found no JVM
  4  the agent jar or exporter config is invalid; no JVM was touched
  5  /proc could not be read

Run "jmx-attach help inject" for the result line format.
`

const listHelp = `Usage: jmx-attach list [--json]

Lists the JVMs visible from here. A process counts as a JVM only when libjvm.so is mapped into it, so
-XX:-UsePerfData JVMs are found and nothing else is. Columns: pid (in this PID namespace), nspid (in the
JVM's own namespace), effective uid, age, Java version, and the main class or jar.

Flags:
  --json   print a JSON array of objects (fields as in pkg/jvm.JVM) instead of a table

Exit codes: 0 listed (possibly none), 2 bad command line, 5 /proc could not be read.
`

const injectHelp = `Usage: jmx-attach inject --agent JAR --config FILE --port N[,N...] (--pid P | --all) [flags]

For each JVM it: checks that the jar has an Agent-Class and the config is a valid jmx_exporter config; skips a
JVM that already has the agent (marker in its /tmp and the port listening); refuses a port the agent could not
bind in the JVM's network namespace (checked by binding it there) and a JVM started with
-XX:+DisableAttachMechanism or -XX:-EnableDynamicAgentLoading; waits until the JVM is --min-age old; copies the jar and config into a new
directory --target-dir/handlerkit-jmx-<random> of the JVM's filesystem (mode 0700, the JVM user's; files
read-only) and verifies them; loads the agent with "load instrument false <jar>=[host:]<port>:<config>"; and
waits until http://<host>:<port>/metrics answers. No signal is sent before every check passed. The copies are
removed when the JVM did not load the agent.

Flags:
  --agent JAR           agent jar on this machine (required)
  --config FILE         exporter config on this machine (required)
  --port N[,N...]       port the agent serves on, in the JVM's network namespace (required). With --all, JVMs
                        that share a network namespace get a port each, oldest first: N for the oldest, then
                        the next free ports above it, or the listed ports in order; a JVM injected before keeps
                        its port. Each result line says the JVM's port.
  --host ADDR           address the agent binds (default: all addresses, as jmx_exporter does)
  --pid P               inject into this pid
  --all                 inject into every JVM found
  --json                print result lines as JSON (the termination log is always JSON)
  --min-age D           minimum JVM age before it is signalled (default 10s)
  --attach-timeout D    wait for the JVM's attach socket (default 10s)
  --http-timeout D      wait for the port to answer HTTP; 0 skips the check (default 15s)
  --target-dir DIR      directory in the JVM's filesystem in which each injection creates its own directory
                        for the jar and config; only root or the JVM's user may be able to change it (default /tmp)
  --termination-log F   also write the JSON result lines to F when it exists (default /dev/termination-log)
  --extra-config-keys K comma-separated top-level config keys to accept besides the known jmx_exporter ones

Result lines: one per JVM. With --json each is a JSON object (Go type pkg/jvm.InjectResult; parse it with
jvm.ParseInjectResult):
  {"pid":123,"nspid":1,"mainClass":"app.jar","status":"ok","message":"...","port":9404,
   "agentPath":"/tmp/handlerkit-jmx-3f9c0a5e1b2d4c68/agent.jar","configPath":"/tmp/handlerkit-jmx-3f9c0a5e1b2d4c68/config.yaml",
   "javaVersion":"17.0.15"}
status is "ok", "already-injected" (a success) or "error"; an error carries a reason such as not-jvm,
too-young, attach-disabled, dynamic-loading-disabled, sigquit-not-handled, agent-jar-invalid, config-invalid,
port-in-use, port-not-permitted, port-check-failed, args-too-long, copy-failed, attach-timeout,
connect-failed, agent-load-failed, agent-start-failed, agent-not-listening, http-check-failed, process-gone,
invalid-request, internal (docs/jmx-attach.md explains each).

Exit codes: 0 all ok or already injected, 1 some JVM failed, 2 bad command line, 3 --all found no JVM,
4 agent jar or config invalid (nothing touched), 5 /proc could not be read.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program, minus the process exit, so that tests can drive it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	switch args[0] {
	case "list":
		return runList(args[1:], stdout, stderr)
	case "inject":
		return runInject(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help", "-help":
		if len(args) > 1 {
			switch args[1] {
			case "list":
				fmt.Fprint(stdout, listHelp)
				return exitOK
			case "inject":
				fmt.Fprint(stdout, injectHelp)
				return exitOK
			}
			fmt.Fprintf(stderr, "jmx-attach: unknown command %q\n\n%s", args[1], usageText)
			return exitUsage
		}
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	fmt.Fprintf(stderr, "jmx-attach: unknown command %q\n\n%s", args[0], usageText)
	return exitUsage
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// parseFlags prints the help itself, once, to stdout for --help and to stderr after an error.
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args; it returns an exit code when the command should stop (help or error).
func parseFlags(fs *flag.FlagSet, args []string, help string, stdout, stderr io.Writer) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, help)
			return exitOK, true
		}
		fmt.Fprintf(stderr, "jmx-attach %s: %v\n\n%s", fs.Name(), err, help)
		return exitUsage, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "jmx-attach %s: unexpected arguments %q\n\n%s", fs.Name(), fs.Args(), help)
		return exitUsage, true
	}
	return 0, false
}

func runList(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("list")
	asJSON := fs.Bool("json", false, "")
	if code, stop := parseFlags(fs, args, listHelp, stdout, stderr); stop {
		return code
	}
	jvms, err := jvm.Discover()
	if err != nil {
		fmt.Fprintf(stderr, "jmx-attach list: %v\n", err)
		return exitListFailure
	}
	if *asJSON {
		if jvms == nil {
			jvms = []jvm.JVM{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(jvms); err != nil {
			fmt.Fprintf(stderr, "jmx-attach list: %v\n", err)
			return exitListFailure
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tNSPID\tUID\tAGE\tVERSION\tMAIN")
	for _, j := range jvms {
		main := j.MainClass
		if main == "" {
			main = "-"
		}
		version := j.JavaVersion
		if version == "" {
			version = "-"
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\n", j.PID, j.NSPID, j.UID, j.Age.Truncate(time.Second), version, main)
	}
	if err := tw.Flush(); err != nil {
		return exitListFailure
	}
	return exitOK
}

func runInject(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("inject")
	var (
		agentJar    = fs.String("agent", "", "")
		config      = fs.String("config", "", "")
		portList    = fs.String("port", "", "")
		host        = fs.String("host", "", "")
		pid         = fs.Int("pid", 0, "")
		all         = fs.Bool("all", false, "")
		asJSON      = fs.Bool("json", false, "")
		minAge      = fs.Duration("min-age", jvm.DefaultMinAge, "")
		attachTO    = fs.Duration("attach-timeout", jvm.DefaultAttachTimeout, "")
		httpTO      = fs.Duration("http-timeout", jvm.DefaultHTTPTimeout, "")
		targetDir   = fs.String("target-dir", jvm.DefaultTargetDir, "")
		termination = fs.String("termination-log", defaultTerminationLog, "")
		extraKeys   = fs.String("extra-config-keys", "", "")
	)
	if code, stop := parseFlags(fs, args, injectHelp, stdout, stderr); stop {
		return code
	}
	var problems []string
	if *agentJar == "" {
		problems = append(problems, "--agent is required")
	}
	if *config == "" {
		problems = append(problems, "--config is required")
	}
	ports, err := parsePorts(*portList)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if len(ports) > 1 && !*all {
		problems = append(problems, "a list of ports needs --all")
	}
	if (*pid > 0) == *all {
		problems = append(problems, "give exactly one of --pid or --all")
	}
	if *pid < 0 {
		problems = append(problems, "--pid must be positive")
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "jmx-attach inject: %s\n\n%s", strings.Join(problems, "; "), injectHelp)
		return exitUsage
	}
	var keys []string
	for _, k := range strings.Split(*extraKeys, ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	in, err := jvm.NewInjector(jvm.WithMinAge(*minAge), jvm.WithAttachTimeout(*attachTO),
		jvm.WithHTTPTimeout(*httpTO), jvm.WithTargetDir(*targetDir), jvm.WithExtraConfigKeys(keys...))
	if err != nil {
		fmt.Fprintf(stderr, "jmx-attach inject: %v\n", err)
		return exitUsage
	}
	agent := jvm.Agent{Jar: *agentJar, Config: *config, Port: ports[0], Host: *host}

	var jvms []jvm.JVM
	var pids []int
	if *all {
		jvms, err = jvm.Discover()
		if err != nil {
			fmt.Fprintf(stderr, "jmx-attach inject: %v\n", err)
			return exitListFailure
		}
		for _, j := range jvms {
			pids = append(pids, j.PID)
		}
		if len(pids) == 0 {
			fmt.Fprintln(stderr, "jmx-attach inject: no JVM found")
			return exitNoJVM
		}
	} else {
		pids = []int{*pid}
	}

	out := &resultWriter{stdout: stdout, asJSON: *asJSON}
	// The jar and config are the same for every JVM: check them once, before any JVM is looked at closely.
	if err := in.Precheck(agent); err != nil {
		for _, p := range pids {
			out.add(jvm.InjectResult{PID: p, Status: jvm.OutcomeError, Reason: jvm.ReasonOf(err), Message: err.Error(),
				Port: agent.Port, Host: agent.Host})
		}
		out.writeTerminationLog(*termination, stderr)
		if jvm.ReasonOf(err) == jvm.ReasonInvalidRequest {
			return exitUsage
		}
		return exitBadAgent
	}
	var results []jvm.InjectResult
	if *all {
		// Several JVMs may share a network namespace: each gets its own port.
		results = in.InjectAll(ctx, jvms, agent, ports...)
	} else {
		results = []jvm.InjectResult{in.Inject(ctx, *pid, agent)}
	}
	code := exitOK
	for _, res := range results {
		out.add(res)
		if !res.OK() {
			code = exitFailed
		}
	}
	out.writeTerminationLog(*termination, stderr)
	return code
}

// parsePorts parses --port: one port, or a comma-separated list.
func parsePorts(s string) ([]int, error) {
	if s == "" {
		return nil, errors.New("--port is required")
	}
	var ports []int
	for _, f := range strings.Split(s, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("--port must be a port 1-65535 or a comma-separated list of them, not %q", s)
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// resultWriter prints result lines and remembers their JSON for the termination log.
type resultWriter struct {
	stdout io.Writer
	asJSON bool
	lines  [][]byte
}

func (w *resultWriter) add(r jvm.InjectResult) {
	line, err := r.MarshalLine()
	if err != nil {
		line = []byte(fmt.Sprintf(`{"pid":%d,"status":"error","reason":"internal","message":%q,"port":%d}`, r.PID, err.Error(), r.Port))
	}
	w.lines = append(w.lines, line)
	if w.asJSON {
		fmt.Fprintf(w.stdout, "%s\n", line)
		return
	}
	fmt.Fprintf(w.stdout, "pid=%d nspid=%d status=%s reason=%s port=%d main=%s message=%s\n", r.PID, r.NSPID, r.Status,
		orDash(string(r.Reason)), r.Port, orDash(r.MainClass), strconv.Quote(r.Message))
}

// writeTerminationLog writes the JSON result lines to path if that file exists (Kubernetes creates it), keeping
// whole lines within the size Kubernetes reads, so an ephemeral container's result shows in the pod's status.
func (w *resultWriter) writeTerminationLog(path string, stderr io.Writer) {
	if path == "" {
		return
	}
	if _, err := os.Stat(path); err != nil {
		return
	}
	var b []byte
	for _, l := range w.lines {
		if len(b)+len(l)+1 > maxTerminationLog {
			break
		}
		b = append(b, l...)
		b = append(b, '\n')
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		fmt.Fprintf(stderr, "jmx-attach: write %s: %v\n", path, err)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return strconv.Quote(s)
}
