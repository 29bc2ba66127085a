// Command operator-scale runs the operator's scale benchmark (issue 28,
// package bench/internal/scale): the real operator binary against the real
// kube-apiserver and etcd of pkg/testenv, with N pods created as objects and
// a simulated kubelet, in two shapes (one exporter selecting every pod; one
// exporter per 10 pods), each on a control plane of its own. It prints a
// markdown table on stdout and progress on stderr.
//
//	go run ./cmd/operator-scale [-pods 10000] [-shapes one,many] [-restart-rate 2] [-steady 2m]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/handlerkit/handlerkit/bench/internal/scale"
	"github.com/handlerkit/handlerkit/bench/internal/suite"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// Section markers of docs/performance.md that -doc replaces the text
// between.
const (
	docBegin = "<!-- operator-scale:begin -->"
	docEnd   = "<!-- operator-scale:end -->"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "operator-scale:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		cfg                  scale.Config
		shapes, args, binary string
		env                  string
		jsonOut, doc, from   string
	)
	flag.IntVar(&cfg.Pods, "pods", 10000, "pods created as objects")
	flag.StringVar(&shapes, "shapes", scale.ShapeOne+","+scale.ShapeMany, "shapes to run, comma-separated: one (one exporter selecting every pod), many (one exporter per -pods-per-exporter pods)")
	flag.IntVar(&cfg.PodsPerExporter, "pods-per-exporter", 10, "pods per exporter in the shape many")
	flag.Float64Var(&cfg.RestartRate, "restart-rate", 2, "containers restarted per second in the steady phase; 0 skips the phase")
	flag.DurationVar(&cfg.SteadyDuration, "steady", 2*time.Minute, "how long the steady phase restarts containers")
	flag.DurationVar(&cfg.Timeout, "timeout", 30*time.Minute, "longest wait for every start to be recorded, per phase")
	flag.StringVar(&binary, "operator", "", "the operator binary (default: built from the checkout with go build)")
	flag.StringVar(&args, "operator-args", "", "more operator flags, space-separated (e.g. --parallelism=16 --breaker-window=10s)")
	flag.StringVar(&env, "operator-env", "", "environment variables for the operator, space-separated NAME=VALUE (e.g. GOMEMLIMIT=230MiB, what the operator sets itself in a container limited to 256 MiB)")
	flag.BoolVar(&cfg.Profile, "profile", false, "build the operator with a pprof server (go build -overlay; the source is not changed), instead of -operator, and save its heap profiles next to its log")
	flag.StringVar(&jsonOut, "json", "", "also write the raw results to this file")
	flag.StringVar(&from, "from", "", "render results saved with -json instead of measuring: files, comma-separated (e.g. one per shape, run apart)")
	flag.StringVar(&doc, "doc", "", "also write the table into this markdown file, between "+docBegin+" and "+docEnd)
	flag.Parse()
	cfg.OperatorArgs = strings.Fields(args)
	cfg.OperatorEnv = strings.Fields(env)
	cfg.Progress = os.Stderr

	if from != "" {
		meta, results, err := load(strings.Split(from, ","))
		if err != nil {
			return err
		}
		md := scale.Markdown(meta, results)
		fmt.Print(md)
		if doc != "" {
			return writeDoc(doc, md)
		}
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := scale.FindRoot()
	if err != nil {
		return err
	}
	if cfg.Dir, err = os.MkdirTemp("", "operator-scale-"); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "operator logs in %s\n", cfg.Dir)
	switch {
	case cfg.Profile:
		// The profiled operator is built here, from the same checkout,
		// whatever -operator names.
		overlay, err := scale.ProfiledBuild(root, cfg.Dir)
		if err != nil {
			return err
		}
		if binary, err = scale.BuildOperator(ctx, root, cfg.Dir, "-trimpath", overlay); err != nil {
			return err
		}
	case binary == "":
		if binary, err = scale.BuildOperator(ctx, root, cfg.Dir, "-trimpath"); err != nil {
			return err
		}
	}
	cfg.Operator = binary
	version, _ := exec.Command(binary, "--version").Output()
	m := suite.DescribeMachine()
	meta := scale.Meta{
		Start:    time.Now(),
		Machine:  fmt.Sprintf("%d × %s, %s RAM", m.CPUs, m.CPUModel, m.Memory),
		Load:     "1-minute load average " + loadAverage() + " at the start",
		Command:  "go run ./cmd/operator-scale " + strings.Join(os.Args[1:], " "),
		Operator: strings.TrimSpace(string(version)),
	}
	var results []*scale.Result
	var runErr error
	for _, shape := range strings.Split(shapes, ",") {
		c := cfg
		c.Shape = strings.TrimSpace(shape)
		res, err := runShape(ctx, root, c)
		if res != nil {
			results = append(results, res)
		}
		if err != nil {
			runErr = fmt.Errorf("shape %s: %w", c.Shape, err)
			break
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintf(os.Stderr, "operator-scale: stopped: %v\n", context.Cause(ctx))
	}
	meta.End = time.Now()
	meta.Load += ", " + loadAverage() + " at the end"
	if len(results) == 0 {
		return runErr
	}
	md := scale.Markdown(meta, results)
	fmt.Print(md)
	if jsonOut != "" {
		raw, err := json.MarshalIndent(scale.Saved{Meta: meta, Results: results}, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonOut, raw, 0o644); err != nil {
			return err
		}
	}
	if doc != "" && runErr == nil {
		if err := writeDoc(doc, md); err != nil {
			return err
		}
	}
	return runErr
}

// runShape measures one shape on a control plane of its own, so that the
// other shape's objects do not weigh on it.
func runShape(ctx context.Context, root string, cfg scale.Config) (*scale.Result, error) {
	// A loaded machine starts the control plane slowly.
	env, err := testenv.Start(ctx, testenv.WithStartTimeout(10*time.Minute))
	if err != nil {
		return nil, err
	}
	defer env.Stop()
	if err := scale.Prepare(ctx, env, root); err != nil {
		return nil, err
	}
	return scale.Run(ctx, env, cfg)
}

// load reads results saved with -json, in the order of files; the Meta is
// the first file's, spanning every file's time and naming every command.
func load(files []string) (scale.Meta, []*scale.Result, error) {
	var meta scale.Meta
	var results []*scale.Result
	for i, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return meta, nil, err
		}
		var s scale.Saved
		if err := json.Unmarshal(raw, &s); err != nil {
			return meta, nil, fmt.Errorf("%s: %w", f, err)
		}
		results = append(results, s.Results...)
		if i == 0 {
			meta = s.Meta
			continue
		}
		if s.Meta.Start.Before(meta.Start) {
			meta.Start = s.Meta.Start
		}
		if s.Meta.End.After(meta.End) {
			meta.End = s.Meta.End
		}
		meta.Load += "; " + s.Meta.Load
		meta.Command += "` and `" + s.Meta.Command
	}
	return meta, results, nil
}

// writeDoc replaces the text between the markers in the file at path.
func writeDoc(path, md string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(raw)
	i, j := strings.Index(s, docBegin), strings.Index(s, docEnd)
	if i < 0 || j < i {
		return errors.New(path + " has no " + docBegin + " … " + docEnd + " section")
	}
	s = s[:i+len(docBegin)] + "\n" + md + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}

func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	if f := strings.Fields(string(raw)); len(f) > 0 {
		return f[0]
	}
	return "unknown"
}
