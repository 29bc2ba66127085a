package scale

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// OperatorPackage is the operator's main package in the handlerkit module.
const OperatorPackage = "./cmd/prometheus-jmx-exporter-operator"

// BuildOperator builds the operator binary from the handlerkit checkout at
// root into dir with `go build` and extra flags (such as -race), and
// returns its path.
func BuildOperator(ctx context.Context, root, dir string, flags ...string) (string, error) {
	out := filepath.Join(dir, "prometheus-jmx-exporter-operator")
	args := append(append([]string{"build"}, flags...), "-o", out, OperatorPackage)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("scale: go %s: %w\n%s", strings.Join(args, " "), err, msg)
	}
	return out, nil
}

// pprofEnv names the variable that gives a profiled operator (ProfiledBuild)
// the address of its pprof server.
const pprofEnv = "OPERATOR_SCALE_PPROF"

// pprofFile is added to the operator's main package by ProfiledBuild: a
// pprof server on the address pprofEnv names. It is not part of the
// operator's source; the benchmark adds it with go build -overlay.
const pprofFile = `package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	if addr := os.Getenv("` + pprofEnv + `"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
}
`

// ProfiledBuild returns the go build flag that adds a pprof server to the
// operator built from root (go build -overlay, with the overlay in dir), so
// that Config.Profile can save its heap profiles. The source tree is not
// changed.
func ProfiledBuild(root, dir string) (string, error) {
	src := filepath.Join(dir, "zz_operator_scale_pprof.go")
	if err := os.WriteFile(src, []byte(pprofFile), 0o644); err != nil {
		return "", err
	}
	overlay := filepath.Join(dir, "overlay.json")
	raw := fmt.Sprintf(`{"Replace":{%q:%q}}`, filepath.Join(root, OperatorPackage, "zz_operator_scale_pprof.go"), src)
	if err := os.WriteFile(overlay, []byte(raw), 0o644); err != nil {
		return "", err
	}
	return "-overlay=" + overlay, nil
}

// FindRoot returns the handlerkit checkout above the working directory: the
// directory with deploy/crds and the operator's main package.
func FindRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, OperatorPackage, "main.go")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("scale: no handlerkit checkout above the working directory")
		}
		dir = parent
	}
}

// operatorProcess is the running operator.
type operatorProcess struct {
	cmd     *exec.Cmd
	metrics string // base URL of /metrics, /readyz
	pprof   string // base URL of /debug/pprof of a profiled build
	log     *os.File
	done    chan struct{}
	waitErr error
}

// startOperator starts the operator binary against the cluster of
// kubeconfig, serving namespace ns, and waits until it is ready. Its log
// goes to logPath.
func startOperator(ctx context.Context, binary, kubeconfig, ns, logPath string, extra, env []string) (*operatorProcess, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	pprofPort, err := freePort()
	if err != nil {
		return nil, err
	}
	pprofAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(pprofPort))
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{
		"--kubeconfig=" + kubeconfig, "--namespaces=" + ns, "--leader-election=none",
		"--metrics-addr=" + addr, "--metrics-service=none", "--webhook=off", "--pod-monitors=false",
		"--report-unserved=false", "--log-level=warn",
	}
	args = append(args, extra...)
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	// A clean environment: POD_NAMESPACE and the flags' variables of the
	// calling shell must not reach it.
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), pprofEnv + "=" + pprofAddr}, env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("scale: start the operator: %w", err)
	}
	p := &operatorProcess{cmd: cmd, metrics: "http://" + addr, pprof: "http://" + pprofAddr + "/debug/pprof", log: log, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(p.metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("scale: the operator exited before it was ready (%v); its log:\n%s", p.waitErr, tail(logPath, 30))
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("scale: the operator was not ready within 2 minutes; its log:\n%s", tail(logPath, 30))
		}
	}
}

// stop ends the operator with SIGTERM (SIGKILL after 30 s) and waits.
func (p *operatorProcess) stop() error {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	p.log.Close()
	return p.waitErr
}

// saveHeap writes the heap profile of a profiled build to path (after a
// garbage collection, so that it shows what is live).
func (p *operatorProcess) saveHeap(path string) error {
	resp, err := http.Get(p.pprof + "/heap?gc=1")
	if err != nil {
		return fmt.Errorf("scale: the operator serves no pprof (build it with ProfiledBuild): %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scale: heap profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// exited says whether the operator ended before stop.
func (p *operatorProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Requests are counts of handlerkit_client_requests_total by verb and
// resource ("patch pods/ephemeralcontainers"), summed over status codes.
type Requests map[string]float64

// seriesLine matches a series of handlerkit_client_requests_total.
var seriesLine = regexp.MustCompile(`^handlerkit_client_requests_total\{([^}]*)\} (\S+)$`)

// labelPair matches one label of a series.
var labelPair = regexp.MustCompile(`(\w+)="([^"]*)"`)

// requests reads the operator's request counter from /metrics.
func (p *operatorProcess) requests() (Requests, error) {
	resp, err := http.Get(p.metrics + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scale: read the operator's metrics: %w", err)
	}
	defer resp.Body.Close()
	return parseRequests(resp.Body)
}

// settle waits until the operator has made no write for quiet (its Events
// go out in the background, behind the work that caused them), at most
// limit, and returns its requests then. A phase that ends before its Events
// are out would hand them to the next phase.
func (p *operatorProcess) settle(ctx context.Context, quiet, limit time.Duration) (Requests, error) {
	last, err := p.requests()
	if err != nil {
		return nil, err
	}
	stable, deadline := time.Now(), time.Now().Add(limit)
	for time.Since(stable) < quiet && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		now, err := p.requests()
		if err != nil {
			return nil, err
		}
		if now.writes() != last.writes() {
			stable = time.Now()
		}
		last = now
	}
	return last, nil
}

// parseRequests reads handlerkit_client_requests_total from the text
// exposition format.
func parseRequests(r io.Reader) (Requests, error) {
	out := Requests{}
	found := false
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		m := seriesLine.FindStringSubmatch(s.Text())
		if m == nil {
			continue
		}
		found = true
		labels := map[string]string{}
		for _, l := range labelPair.FindAllStringSubmatch(m[1], -1) {
			labels[l[1]] = l[2]
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return nil, fmt.Errorf("scale: metrics line %q: %w", s.Text(), err)
		}
		resource := labels["resource"]
		if resource == "" {
			resource = "(discovery)"
		}
		out[labels["verb"]+" "+resource] += v
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if !found {
		return nil, errors.New("scale: the operator's /metrics has no handlerkit_client_requests_total")
	}
	return out, nil
}

// minus returns r - before.
func (r Requests) minus(before Requests) Requests { return difference(r, before) }

// difference returns after - before, key by key, without the keys that did
// not change.
func difference[M ~map[string]float64](after, before M) M {
	out := M{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// writes sums the requests whose verb writes.
func (r Requests) writes() float64 {
	var n float64
	for k, v := range r {
		switch verb, _, _ := strings.Cut(k, " "); verb {
		case "create", "update", "patch", "delete", "deletecollection":
			n += v
		}
	}
	return n
}

// statusWrites sums the writes of the exporters' status.
func (r Requests) statusWrites() float64 {
	return r["update prometheusjmxexporters/status"] + r["patch prometheusjmxexporters/status"]
}

// procStats are the operator process's CPU time and peak RSS.
type procStats struct {
	CPUSeconds float64
	PeakRSS    uint64 // bytes, VmHWM
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// readProc reads /proc/<pid>/stat (utime + stime) and VmHWM of
// /proc/<pid>/status.
func readProc(pid int) (procStats, error) {
	var s procStats
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// The fields after the command name, which ends at the last ')'.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return s, fmt.Errorf("scale: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return s, fmt.Errorf("scale: short /proc/%d/stat", pid)
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return s, err
	}
	s.CPUSeconds = float64(utime+stime) / clockTicks
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return s, err
			}
			s.PeakRSS = kb * 1024
		}
	}
	return s, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
