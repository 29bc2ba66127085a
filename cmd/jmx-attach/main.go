// Command jmx-attach finds the JVMs running on a machine or in a pod and loads a java agent (the Prometheus
// jmx_exporter) into them over the HotSpot attach protocol. It is one static binary: the target container needs
// no shell, JDK or writable /opt. Build it with CGO_ENABLED=0.
//
//	jmx-attach list [--json]
//	jmx-attach inject (--agent JAR (--config FILE | --config-env NAME) | --bundle-stdin) --port N[,N...] (--pid P | --all) [--json]
//	jmx-attach reconfigure (--config FILE | --config-env NAME | --bundle-stdin) (--pid P | --all) [--json]
//	jmx-attach copy-agent [--from JAR] --to DIR
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

	"github.com/handlerkit/handlerkit/internal/buildinfo"
	"github.com/handlerkit/handlerkit/pkg/jvm"
)

// Exit codes.
const (
	exitOK          = 0 // every JVM injected or already injected; list succeeded
	exitFailed      = 1 // at least one JVM failed; see its result line
	exitUsage       = 2 // bad command line
	exitNoJVM       = 3 // --all found no JVM (or none matching --jvm)
	exitBadAgent    = 4 // the agent jar, config or stdin bundle is invalid; no JVM was touched
	exitListFailure = 5 // /proc could not be read
	exitNoContainer = 6 // --container-id: not one process of the container could be identified; nothing touched
)

// defaultTerminationLog is where Kubernetes reads a container's termination message.
const defaultTerminationLog = "/dev/termination-log"

const usageText = `jmx-attach finds running JVMs and loads a java agent (the Prometheus jmx_exporter) into them, in pure Go.

Usage:
  jmx-attach list [--json] [--container-id ID]
  jmx-attach inject (--agent JAR (--config FILE | --config-env NAME) | --bundle-stdin) --port N[,N...] (--pid P | --all) [flags]
  jmx-attach reconfigure (--config FILE | --config-env NAME | --bundle-stdin) (--pid P | --all) [flags]
  jmx-attach copy-agent [--from JAR] --to DIR
  jmx-attach help [command]
  jmx-attach version

Commands:
  list         list the JVMs visible from here (found through /proc, not hsperfdata)
  inject       check, copy and load the agent into JVMs, then check that the port answers HTTP
  reconfigure  replace the exporter config of agents loaded before; the agent reads it at its next scrape
  copy-agent   copy the agent jar into a directory for -javaagent (the start-time injection's init container)
  version      print the version, commit and build date

Exit codes:
  0  success: every JVM was injected, already had the agent or was reconfigured (or left unchanged), or the
     list was printed (list)
  1  at least one JVM failed; its result line says why (reason field)
  2  bad command line
  3  --all found no JVM (or none matching --jvm)
  4  the agent jar, exporter config or stdin bundle is invalid; no JVM was touched
  5  /proc could not be read
  6  --container-id: not one process of that container could be identified; nothing was touched

Every command takes --container-id <runtime>://<64 hex digits> (the containerID of a pod's container status):
only the processes of that container, found by their /proc/<pid>/cgroup, are considered; nothing else in
/proc is read beyond its cgroup file. Run as root, jmx-attach handles a JVM of another user as that user (it
runs itself again with the JVM's uid and gid), which needs CAP_SETUID and CAP_SETGID and nothing else.

Run "jmx-attach help inject" for the result line format.
`

const listHelp = `Usage: jmx-attach list [--json] [--container-id ID]

Lists the JVMs visible from here. A process counts as a JVM only when libjvm.so is mapped into it, so
-XX:-UsePerfData JVMs are found and nothing else is. Columns: pid (in this PID namespace), nspid (in the
JVM's own namespace), effective uid, age, Java version, and the main class or jar.

Flags:
  --json               print a JSON array of objects (fields as in pkg/jvm.JVM) instead of a table
  --container-id ID    only the processes of container ID (<runtime>://<64 hex digits>), by their cgroup

Exit codes: 0 listed (possibly none), 2 bad command line, 5 /proc could not be read, 6 no process of the
container could be identified.
`

const injectHelp = `Usage: jmx-attach inject (--agent JAR (--config FILE | --config-env NAME) | --bundle-stdin) --port N[,N...] (--pid P | --all) [flags]

For each JVM it: checks that the jar has an Agent-Class and the config is a valid jmx_exporter config; takes
the JVM's lock, so that two jmx-attach never inject one JVM at once; skips a JVM that already has the agent
(marker in its /tmp and the port listening), giving it the new config as reconfigure does when its config
differs; refuses a JVM that runs a jmx_exporter -javaagent already (agent-already-present), one whose
container has too little room under its memory limit (insufficient-memory), a port the agent could not bind
in the JVM's network namespace (checked by binding it there) and a JVM started with
-XX:+DisableAttachMechanism or -XX:-EnableDynamicAgentLoading; waits until the JVM is --min-age old (or, with
--wait, until it can be signalled safely); copies the jar and config into a new directory
--target-dir/handlerkit-jmx-<random> of the JVM's filesystem (mode 0700, the JVM user's; files read-only) and
verifies them; loads the agent with "load instrument false <jar>=[host:]<port>:<config>"; reads the agent's
verdict from agent-status.json beside the config (a refusal is an error with the agent's reason and message);
and waits until the port listens (an agent that reported serving) or http://<host>:<port>/metrics answers (an
agent that writes no status). No signal is sent before every check passed. The copies are removed when the
JVM did not load the agent.

It needs no capability when it runs as the JVM's user (or as root against a root JVM whose capabilities it
has) in the JVM's network namespace: an ephemeral container targeting the JVM's container, or pods/exec.

Flags:
  --agent JAR           agent jar on this machine
  --config FILE         exporter config on this machine
  --config-env NAME     read the exporter config from environment variable NAME instead of --config: plain
                        YAML, or gzip+base64: followed by the base64 of the gzipped config (at most 1 MiB
                        once decompressed; more, or a value that does not decode, is config-invalid)
  --bundle-stdin        read the agent jar and config from stdin, a tar stream of exactly agent.jar (at most
                        64 MiB) and config.yaml (at most 1 MiB), instead of --agent and --config; stdin is read
                        completely before anything is injected (Go: jvm.WriteBundle writes it)
  --port N[,N...]       port the agent serves on, in the JVM's network namespace (required). With --all, JVMs
                        that share a network namespace get a port each, oldest first: N for the oldest, then
                        the next free ports above it, or the listed ports in order; a JVM injected before keeps
                        its port. Each result line says the JVM's port.
  --host ADDR           address the agent binds (default: all addresses, as jmx_exporter does)
  --pid P               inject into this pid
  --all                 inject into every JVM found
  --jvm PATTERN         with --all, only JVMs whose main class or jar (as on the command line, or its last
                        element) matches a path.Match glob; repeatable, or comma-separated. None matching: exit 3
  --json                print result lines as JSON (the termination log is always JSON)
  --min-age D           minimum JVM age before it is signalled (default 10s)
  --wait D              inject as soon as it is safe (use with --min-age 0): wait up to D for --all to find a
                        JVM, for --pid to become a JVM, and for a starting JVM's SIGQUIT handler or attach
                        socket; refused only after D (default 0: no waiting)
  --attach-timeout D    wait for the JVM's attach socket (default 10s)
  --http-timeout D      wait for the port to answer HTTP; 0 skips the check (default 15s)
  --min-memory-headroom SIZE
                        the room the JVM's container must have under its memory limit (cgroup v2 or v1; limit
                        minus usage, reclaimable file cache not counted), or the JVM is refused with
                        insufficient-memory before any signal; 0 disables the check (default 40Mi)
  --reload-timeout D    a JVM injected before with another config is given the new one, as reconfigure does;
                        wait this long for the agent's verdict on it (default 15s)
  --target-dir DIR      directory in the JVM's filesystem in which each injection creates its own directory
                        for the jar and config; only root or the JVM's user may be able to change it (a sticky
                        /tmp, or the pod's own emptyDir volume, qualifies; a symbolic link on the way is resolved
                        in the JVM's root) (default /tmp)
  --termination-log F   also write the results to F when it exists, as JSON lines that fit in 4,096 bytes
                        (default /dev/termination-log)
  --extra-config-keys K comma-separated top-level config keys to accept besides the known jmx_exporter ones
  --container-id ID     only the processes of container ID (<runtime>://<64 hex digits>, a pod's
                        status.containerStatuses[].containerID): a process belongs when its /proc/<pid>/cgroup
                        names the id (or, run inside that container, is this process's own cgroup). Nothing
                        else in /proc is read beyond its cgroup file, a --pid outside it is container-not-found,
                        and when not one process of it can be identified the result is container-not-found
                        (exit 6), never the rest of /proc. Before its injections, the copies of JVMs of the
                        container that are gone are removed from --target-dir

Result lines: one per JVM. With --json each is a JSON object (Go type pkg/jvm.InjectResult; parse it with
jvm.ParseInjectResult, the termination log with jvm.ParseTerminationLog):
  {"pid":123,"nspid":1,"mainClass":"app.jar","status":"ok","message":"...","port":9404,
   "agentPath":"/tmp/handlerkit-jmx-3f9c0a5e1b2d4c68/agent.jar","configPath":"/tmp/handlerkit-jmx-3f9c0a5e1b2d4c68/config.yaml",
   "javaVersion":"17.0.15","startedAt":"2026-05-04T10:11:12.34Z"}
status is "ok", "already-injected" (a success) or "error"; an error carries a reason such as not-jvm,
too-young, attach-disabled, dynamic-loading-disabled, sigquit-not-handled, agent-jar-invalid, config-invalid,
bundle-invalid, agent-already-present, config-rejected, insufficient-memory, root-inaccessible, port-in-use,
port-not-permitted, port-check-failed, args-too-long, copy-failed, lock-failed, proc-access-denied,
attach-timeout, connect-failed, agent-load-failed, agent-start-failed, agent-not-listening, http-check-failed,
process-gone, invalid-request, internal (docs/jmx-attach.md explains each). An optional "note" adds a remark,
such as a new httpServer section that takes effect only at the JVM's next start.

Exit codes: 0 all ok or already injected, 1 some JVM failed, 2 bad command line, 3 --all found no JVM (or
none matching --jvm), 4 agent jar, config or bundle invalid (nothing touched), 5 /proc could not be read,
6 no process of the --container-id container could be identified (nothing touched).
`

const reconfigureHelp = `Usage: jmx-attach reconfigure (--config FILE | --config-env NAME | --bundle-stdin) (--pid P | --all) [flags]

Replaces the exporter config of agents that "jmx-attach inject" loaded before. For each JVM it validates the
new config exactly as inject does (a bad config never reaches the agent), takes the JVM's lock, finds the
config file the agent reads from the JVM's marker, checks it as inject checks its copies (inside a
handlerkit-jmx-<random> directory that only root or the JVM's user can change), and, unless the file already
holds the new bytes, writes a new read-only file beside it and renames it over the old one. The agent reads
the file again; the project's agent then reports its verdict in agent-status.json beside it, which is waited
for (--reload-timeout): ok (or unchanged) when it serves the new config, config-rejected with its message when
it refused it and kept the old one. jmx_exporter's own agent reports nothing: ok once the file is written. The
agent's port cannot change while it runs; a changed httpServer section is reported in "note".

Flags:
  --config FILE         the new exporter config on this machine
  --config-env NAME     read the new config from environment variable NAME (plain YAML or gzip+base64:, as
                        for inject)
  --bundle-stdin        read the new config from stdin, a tar stream of exactly config.yaml (at most 1 MiB)
  --pid P               reconfigure this pid
  --all                 reconfigure every JVM found
  --jvm PATTERN         with --all, only JVMs whose main class or jar matches (as for inject)
  --json                print result lines as JSON
  --reload-timeout D    wait this long for the agent's verdict on the new config (default 15s)
  --termination-log F   also write the results to F when it exists (default /dev/termination-log)
  --extra-config-keys K comma-separated top-level config keys to accept besides the known jmx_exporter ones
  --container-id ID     only the processes of container ID, as for inject

Result lines are those of inject. status is "ok" (replaced), "unchanged" (already held these bytes; a
success) or "error" with a reason such as not-injected, config-invalid, config-rejected, bundle-invalid,
copy-failed, lock-failed, proc-access-denied, not-jvm, process-gone, internal (no verdict in time). port is the agent's port, from the marker.

Exit codes: 0 every JVM reconfigured or unchanged, 1 some JVM failed, 2 bad command line, 3 --all found no
JVM (or none matching --jvm), 4 config or bundle invalid (nothing touched), 5 /proc could not be read, 6 no
process of the --container-id container could be identified.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program, minus the process exit, so that tests can drive it.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	switch args[0] {
	case "list":
		return runList(args[1:], stdout, stderr)
	case "inject":
		return runInject(ctx, args[1:], stdin, stdout, stderr)
	case "reconfigure":
		return runReconfigure(ctx, args[1:], stdin, stdout, stderr)
	case "copy-agent":
		return runCopyAgent(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, buildinfo.Get().Line("jmx-attach"))
		return exitOK
	case "help", "-h", "--help", "-help":
		if len(args) > 1 {
			switch args[1] {
			case "list":
				fmt.Fprint(stdout, listHelp)
				return exitOK
			case "inject":
				fmt.Fprint(stdout, injectHelp)
				return exitOK
			case "reconfigure":
				fmt.Fprint(stdout, reconfigureHelp)
				return exitOK
			case "copy-agent":
				fmt.Fprint(stdout, copyAgentHelp)
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
	containerID := fs.String("container-id", "", "")
	if code, stop := parseFlags(fs, args, listHelp, stdout, stderr); stop {
		return code
	}
	container, err := parseContainer(*containerID)
	if err != nil {
		fmt.Fprintf(stderr, "jmx-attach list: %v\n\n%s", err, listHelp)
		return exitUsage
	}
	jvms, err := jvm.DiscoverIn(container)
	if err != nil {
		fmt.Fprintf(stderr, "jmx-attach list: %v\n", err)
		if jvm.ReasonOf(err) == jvm.ReasonContainerNotFound {
			return exitNoContainer
		}
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

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// inputFlags are the flags that say where the agent jar and the exporter config come from.
type inputFlags struct {
	agentJar, config, configEnv *string
	bundle                      *bool
}

func addInputFlags(fs *flag.FlagSet, withAgent bool) inputFlags {
	f := inputFlags{config: fs.String("config", "", ""), configEnv: fs.String("config-env", "", ""),
		bundle: fs.Bool("bundle-stdin", false, "")}
	if withAgent {
		f.agentJar = fs.String("agent", "", "")
	}
	return f
}

// check returns the command line problems of the input flags.
func (f inputFlags) check() []string {
	var problems []string
	withAgent := f.agentJar != nil
	if *f.bundle {
		if (withAgent && *f.agentJar != "") || *f.config != "" || *f.configEnv != "" {
			if withAgent {
				problems = append(problems, "--bundle-stdin replaces --agent, --config and --config-env")
			} else {
				problems = append(problems, "--bundle-stdin replaces --config and --config-env")
			}
		}
		return problems
	}
	if withAgent && *f.agentJar == "" {
		problems = append(problems, "--agent is required (or --bundle-stdin)")
	}
	switch {
	case *f.config == "" && *f.configEnv == "":
		problems = append(problems, "give exactly one of --config, --config-env or --bundle-stdin")
	case *f.config != "" && *f.configEnv != "":
		problems = append(problems, "give only one of --config and --config-env")
	case *f.configEnv != "":
		if _, ok := os.LookupEnv(*f.configEnv); !ok {
			problems = append(problems, fmt.Sprintf("--config-env: environment variable %s is not set", *f.configEnv))
		}
	}
	return problems
}

// agent builds the Agent to inject from the input flags, reading stdin completely when --bundle-stdin is set.
// An error is an *jvm.AttachError (ReasonBundleInvalid, or ReasonConfigInvalid for a --config-env value that
// does not decode).
func (f inputFlags) agent(stdin io.Reader) (jvm.Agent, error) {
	withAgent := f.agentJar != nil
	switch {
	case *f.bundle:
		b, err := jvm.ReadBundle(stdin, withAgent)
		if err != nil {
			return jvm.Agent{}, err
		}
		return jvm.Agent{Jar: jvm.BundleAgentJar, JarData: b.AgentJar, Config: jvm.BundleConfig, ConfigData: b.Config}, nil
	case *f.configEnv != "":
		data, err := jvm.DecodeConfigEnv(os.Getenv(*f.configEnv))
		if err != nil {
			return jvm.Agent{}, err
		}
		a := jvm.Agent{Config: jvm.BundleConfig, ConfigData: data}
		if withAgent {
			a.Jar = *f.agentJar
		}
		return a, nil
	}
	a := jvm.Agent{Config: *f.config}
	if withAgent {
		a.Jar = *f.agentJar
	}
	return a, nil
}

// configBytes returns the exporter config the input flags name (reconfigure).
func configBytes(a jvm.Agent) ([]byte, error) {
	if a.ConfigData != nil {
		return a.ConfigData, nil
	}
	data, err := os.ReadFile(a.Config)
	if err != nil {
		return nil, &jvm.AttachError{Reason: jvm.ReasonConfigInvalid, Msg: "exporter config", Err: err}
	}
	return data, nil
}

// selectTargets returns the pids to work on: --pid, or with --all the JVMs found (waiting up to wait for one)
// that match the --jvm patterns. It returns an exit code when there is nothing to do.
func selectTargets(ctx context.Context, cmd string, container *jvm.Container, pid int, all bool, wait time.Duration, patterns []string,
	out *resultWriter, termination string, stderr io.Writer) ([]jvm.JVM, []int, int, bool) {
	if !all {
		return nil, []int{pid}, 0, false
	}
	jvms, unmatched, err := jvm.WaitForJVMsIn(ctx, container, wait, patterns)
	if err != nil {
		fmt.Fprintf(stderr, "jmx-attach %s: %v\n", cmd, err)
		if jvm.ReasonOf(err) == jvm.ReasonContainerNotFound {
			// The result line (and termination log) says why, in the shape the operator reads.
			out.add(jvm.InjectResult{Status: jvm.OutcomeError, Reason: jvm.ReasonContainerNotFound, Message: err.Error()})
			out.writeTerminationLog(termination, stderr)
			return nil, nil, exitNoContainer, true
		}
		return nil, nil, exitListFailure, true
	}
	if len(jvms) == 0 {
		if len(patterns) > 0 {
			fmt.Fprintf(stderr, "jmx-attach %s: no JVM matches --jvm %s\n", cmd, strings.Join(unmatched, ", "))
		} else {
			fmt.Fprintf(stderr, "jmx-attach %s: no JVM found\n", cmd)
		}
		return nil, nil, exitNoJVM, true
	}
	if len(unmatched) > 0 {
		fmt.Fprintf(stderr, "jmx-attach %s: --jvm %s matched no JVM\n", cmd, strings.Join(unmatched, ", "))
	}
	pids := make([]int, len(jvms))
	for i, j := range jvms {
		pids[i] = j.PID
	}
	return jvms, pids, 0, false
}

func runInject(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("inject")
	input := addInputFlags(fs, true)
	var patterns stringList
	fs.Var(&patterns, "jvm", "")
	var (
		portList    = fs.String("port", "", "")
		host        = fs.String("host", "", "")
		pid         = fs.Int("pid", 0, "")
		all         = fs.Bool("all", false, "")
		asJSON      = fs.Bool("json", false, "")
		minAge      = fs.Duration("min-age", jvm.DefaultMinAge, "")
		wait        = fs.Duration("wait", 0, "")
		attachTO    = fs.Duration("attach-timeout", jvm.DefaultAttachTimeout, "")
		httpTO      = fs.Duration("http-timeout", jvm.DefaultHTTPTimeout, "")
		reloadTO    = fs.Duration("reload-timeout", jvm.DefaultReloadTimeout, "")
		headroom    = fs.String("min-memory-headroom", "40Mi", "")
		targetDir   = fs.String("target-dir", jvm.DefaultTargetDir, "")
		termination = fs.String("termination-log", defaultTerminationLog, "")
		extraKeys   = fs.String("extra-config-keys", "", "")
		containerID = fs.String("container-id", "", "")
	)
	if code, stop := parseFlags(fs, args, injectHelp, stdout, stderr); stop {
		return code
	}
	problems := input.check()
	container, err := parseContainer(*containerID)
	if err != nil {
		problems = append(problems, err.Error())
	}
	ports, err := parsePorts(*portList)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if len(ports) > 1 && !*all {
		problems = append(problems, "a list of ports needs --all")
	}
	problems = append(problems, checkTarget(*pid, *all, patterns)...)
	if *wait < 0 {
		problems = append(problems, "--wait must not be negative")
	}
	pats, err := jvm.ParseJVMPatterns(patterns...)
	if err != nil {
		problems = append(problems, err.Error())
	}
	minHeadroom, err := parseSize(*headroom)
	if err != nil {
		problems = append(problems, "--min-memory-headroom: "+err.Error())
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "jmx-attach inject: %s\n\n%s", strings.Join(problems, "; "), injectHelp)
		return exitUsage
	}
	child := childFlags{"--min-age", minAge.String(), "--wait", wait.String(), "--attach-timeout", attachTO.String(),
		"--http-timeout", httpTO.String(), "--reload-timeout", reloadTO.String(), "--min-memory-headroom", strconv.FormatInt(minHeadroom, 10),
		"--target-dir", *targetDir, "--extra-config-keys", *extraKeys, "--container-id", *containerID}
	in, err := jvm.NewInjector(jvm.WithMinAge(*minAge), jvm.WithWait(*wait), jvm.WithAttachTimeout(*attachTO),
		jvm.WithHTTPTimeout(*httpTO), jvm.WithReloadTimeout(*reloadTO), jvm.WithMinMemoryHeadroom(minHeadroom), jvm.WithTargetDir(*targetDir),
		jvm.WithExtraConfigKeys(splitKeys(*extraKeys)...), jvm.WithContainer(container), jvm.WithUserRunner(child.run(stderr)))
	if err != nil {
		fmt.Fprintf(stderr, "jmx-attach inject: %v\n", err)
		return exitUsage
	}
	// Stdin is read completely before any JVM is looked at.
	agent, inputErr := input.agent(stdin)
	agent.Port, agent.Host = ports[0], *host

	out := &resultWriter{stdout: stdout, asJSON: *asJSON}
	jvms, pids, code, stop := selectTargets(ctx, "inject", container, *pid, *all, *wait, pats, out, *termination, stderr)
	if stop {
		return code
	}
	// The jar and config are the same for every JVM: check them once, before any JVM is looked at closely.
	if inputErr == nil {
		inputErr = in.Precheck(agent)
	}
	if inputErr != nil {
		for _, p := range pids {
			out.add(jvm.InjectResult{PID: p, Status: jvm.OutcomeError, Reason: jvm.ReasonOf(inputErr), Message: inputErr.Error(),
				Port: agent.Port, Host: agent.Host})
		}
		out.writeTerminationLog(*termination, stderr)
		if jvm.ReasonOf(inputErr) == jvm.ReasonInvalidRequest {
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
	return out.finish(results, *termination, stderr)
}

func runReconfigure(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("reconfigure")
	input := addInputFlags(fs, false)
	var patterns stringList
	fs.Var(&patterns, "jvm", "")
	var (
		pid         = fs.Int("pid", 0, "")
		all         = fs.Bool("all", false, "")
		asJSON      = fs.Bool("json", false, "")
		reloadTO    = fs.Duration("reload-timeout", jvm.DefaultReloadTimeout, "")
		termination = fs.String("termination-log", defaultTerminationLog, "")
		extraKeys   = fs.String("extra-config-keys", "", "")
		containerID = fs.String("container-id", "", "")
	)
	if code, stop := parseFlags(fs, args, reconfigureHelp, stdout, stderr); stop {
		return code
	}
	problems := append(input.check(), checkTarget(*pid, *all, patterns)...)
	container, err := parseContainer(*containerID)
	if err != nil {
		problems = append(problems, err.Error())
	}
	pats, err := jvm.ParseJVMPatterns(patterns...)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "jmx-attach reconfigure: %s\n\n%s", strings.Join(problems, "; "), reconfigureHelp)
		return exitUsage
	}
	child := childFlags{"--reload-timeout", reloadTO.String(), "--extra-config-keys", *extraKeys, "--container-id", *containerID}
	in, err := jvm.NewInjector(jvm.WithReloadTimeout(*reloadTO), jvm.WithExtraConfigKeys(splitKeys(*extraKeys)...),
		jvm.WithContainer(container), jvm.WithUserRunner(child.run(stderr)))
	if err != nil {
		fmt.Fprintf(stderr, "jmx-attach reconfigure: %v\n", err)
		return exitUsage
	}
	agent, inputErr := input.agent(stdin)
	var config []byte
	if inputErr == nil {
		config, inputErr = configBytes(agent)
	}
	if inputErr == nil {
		if err := jvm.ValidateExporterConfig(config, splitKeys(*extraKeys)...); err != nil {
			inputErr = &jvm.AttachError{Reason: jvm.ReasonConfigInvalid, Msg: "exporter config", Err: err}
		}
	}
	out := &resultWriter{stdout: stdout, asJSON: *asJSON}
	_, pids, code, stop := selectTargets(ctx, "reconfigure", container, *pid, *all, 0, pats, out, *termination, stderr)
	if stop {
		return code
	}
	if inputErr != nil {
		for _, p := range pids {
			out.add(jvm.InjectResult{PID: p, Status: jvm.OutcomeError, Reason: jvm.ReasonOf(inputErr), Message: inputErr.Error()})
		}
		out.writeTerminationLog(*termination, stderr)
		return exitBadAgent
	}
	results := make([]jvm.InjectResult, 0, len(pids))
	for _, p := range pids {
		results = append(results, in.Reconfigure(ctx, p, config))
	}
	return out.finish(results, *termination, stderr)
}

// parseContainer returns the container --container-id names, nil when it is empty.
func parseContainer(id string) (*jvm.Container, error) {
	if id == "" {
		return nil, nil
	}
	c, err := jvm.NewContainer(id)
	if err != nil {
		return nil, fmt.Errorf("--container-id: %w", err)
	}
	return c, nil
}

// checkTarget returns the command line problems of --pid, --all and --jvm.
func checkTarget(pid int, all bool, patterns []string) []string {
	var problems []string
	if (pid > 0) == all {
		problems = append(problems, "give exactly one of --pid or --all")
	}
	if pid < 0 {
		problems = append(problems, "--pid must be positive")
	}
	if len(patterns) > 0 && !all {
		problems = append(problems, "--jvm needs --all")
	}
	return problems
}

func splitKeys(s string) []string {
	var keys []string
	for _, k := range strings.Split(s, ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

// parseSize parses a size in bytes: a whole number with an optional binary suffix Ki, Mi or Gi (KiB, MiB and
// GiB too), as Kubernetes quantities spell them.
func parseSize(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}} {
		if v, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = v, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size such as 32Mi, 1Gi or 33554432", s)
	}
	return n * mult, nil
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

// resultWriter prints result lines and keeps the results for the termination log.
type resultWriter struct {
	stdout  io.Writer
	asJSON  bool
	results []jvm.InjectResult
}

func (w *resultWriter) add(r jvm.InjectResult) {
	w.results = append(w.results, r)
	if w.asJSON {
		line, err := r.MarshalLine()
		if err != nil {
			line = []byte(fmt.Sprintf(`{"pid":%d,"status":"error","reason":"internal","message":%q,"port":%d}`, r.PID, err.Error(), r.Port))
		}
		fmt.Fprintf(w.stdout, "%s\n", line)
		return
	}
	fmt.Fprintf(w.stdout, "pid=%d nspid=%d status=%s reason=%s port=%d main=%s message=%s\n", r.PID, r.NSPID, r.Status,
		orDash(string(r.Reason)), r.Port, orDash(r.MainClass), strconv.Quote(r.Message))
}

// finish prints results, writes the termination log and returns the exit code.
func (w *resultWriter) finish(results []jvm.InjectResult, termination string, stderr io.Writer) int {
	code := exitOK
	for _, res := range results {
		w.add(res)
		if !res.OK() {
			code = exitFailed
		}
	}
	w.writeTerminationLog(termination, stderr)
	return code
}

// writeTerminationLog writes the results to path, if that file exists (Kubernetes creates it), in the compact
// form of jvm.FormatTerminationLog, which fits the 4,096 bytes Kubernetes keeps, so an ephemeral container's
// results show in the pod's status.
func (w *resultWriter) writeTerminationLog(path string, stderr io.Writer) {
	if path == "" {
		return
	}
	if _, err := os.Stat(path); err != nil {
		return
	}
	if err := os.WriteFile(path, jvm.FormatTerminationLog(w.results), 0o644); err != nil {
		fmt.Fprintf(stderr, "jmx-attach: write %s: %v\n", path, err)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return strconv.Quote(s)
}
