// Package prometheus runs a real Prometheus server for tests: the release
// testenv.PrometheusVersion, built from the Go module proxy into the cache on
// first use (testenv.Binary). It listens on loopback, finds its targets with
// the configuration it is given (typically Kubernetes pod or endpoint slice
// discovery against a testenv cluster, through WithKubeconfig), scrapes them
// from the host (pod IPs on the environment's bridge are reachable from the
// host), and answers PromQL through its HTTP API.
//
// The process dies with the test binary, even when that is killed with
// SIGKILL (Pdeathsig), and Stop removes its directory.
package prometheus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/handlerkit/handlerkit/pkg/testenv"
	"github.com/handlerkit/handlerkit/pkg/testenv/freeport"
	"github.com/handlerkit/handlerkit/pkg/testenv/internal/spawn"
)

// DefaultStartTimeout bounds Start's wait for the server to be ready, not the
// build of a missing binary (which ctx bounds).
const DefaultStartTimeout = time.Minute

// Option configures Start.
type Option func(*options)

type options struct {
	kubeconfig   string
	startTimeout time.Duration
	args         []string
}

// WithKubeconfig sets kubeconfig_file to path in every kubernetes_sd_configs
// entry of the configuration that names neither an api_server nor a
// kubeconfig_file: such an entry is written for a Prometheus that runs in the
// cluster (it reads the pod's ServiceAccount), and this is how the same job
// finds the API server from outside. Nothing else in the configuration
// changes. Use the file of testenv's Environment.KubeconfigFile.
func WithKubeconfig(path string) Option { return func(o *options) { o.kubeconfig = path } }

// WithStartTimeout bounds the wait for the server to report ready (default
// DefaultStartTimeout).
func WithStartTimeout(d time.Duration) Option { return func(o *options) { o.startTimeout = d } }

// WithArgs adds command-line flags to the server's (for example
// "--log.level=debug"); a later flag overrides an earlier one.
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// Server is a running Prometheus server.
type Server struct {
	url        string
	dir        string
	configFile string
	logPath    string
	kubeconfig string
	port       int

	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed

	stopOnce sync.Once
	stopErr  error
}

// New starts a server for a test with config (a prometheus.yml document),
// stops it in t.Cleanup, and fails the test when it cannot start.
func New(t testing.TB, config []byte, opts ...Option) *Server {
	t.Helper()
	s, err := Start(t.Context(), config, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("prometheus: stop: %v", err)
		}
	})
	return s
}

// Start starts a server with config, a complete prometheus.yml document, on a
// free 127.0.0.1 port, with its data in a new temporary directory, and
// returns once it reports ready. The server reloads its configuration on
// Reload. ctx bounds the start, including a build of the binary when the
// cache lacks it; it does not bound the server's life: call Stop.
func Start(ctx context.Context, config []byte, opts ...Option) (*Server, error) {
	o := options{startTimeout: DefaultStartTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	bin, err := testenv.Binary(ctx, "prometheus")
	if err != nil {
		return nil, err
	}
	removeStaleDirs()
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	s := &Server{dir: dir, configFile: filepath.Join(dir, "prometheus.yml"), logPath: filepath.Join(dir, "prometheus.log"),
		kubeconfig: o.kubeconfig, done: make(chan struct{})}
	if err := s.writeConfig(config); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	port, err := freeport.Loopback()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	s.port = port
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s.url = "http://" + addr
	args := append([]string{
		"--config.file=" + s.configFile,
		"--web.listen-address=" + addr,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		// POST /-/reload, for Reload.
		"--web.enable-lifecycle",
	}, o.args...)
	logFile, err := os.Create(s.logPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := spawn.Start(s.cmd); err != nil {
		logFile.Close()
		os.RemoveAll(dir)
		freeport.Release(port)
		return nil, fmt.Errorf("prometheus: starting %s: %w", bin, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		logFile.Close()
		close(s.done)
	}()
	wctx, cancel := context.WithTimeout(ctx, o.startTimeout)
	defer cancel()
	if err := s.waitReady(wctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// dirPrefix starts the name of every server's directory in the temporary
// directory; ownerFile in it holds the pid of the process that started the
// server.
const (
	dirPrefix = "handlerkit-prometheus-"
	ownerFile = "owner.pid"
)

// removeStaleDirs removes the directories of servers whose starting process
// is gone: a test binary killed with SIGKILL takes its server along
// (Pdeathsig) but cannot remove the directory.
func removeStaleDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

// writeConfig writes config into the server's file, with the kubeconfig
// filled in (see WithKubeconfig); a file that Prometheus would refuse is
// refused by Reload's answer or Start's readiness wait, not here.
func (s *Server) writeConfig(config []byte) error {
	if s.kubeconfig != "" {
		var err error
		if config, err = withKubeconfig(config, s.kubeconfig); err != nil {
			return err
		}
	}
	tmp := s.configFile + ".tmp"
	if err := os.WriteFile(tmp, config, 0o600); err != nil {
		return fmt.Errorf("prometheus: %w", err)
	}
	if err := os.Rename(tmp, s.configFile); err != nil {
		return fmt.Errorf("prometheus: %w", err)
	}
	return nil
}

// withKubeconfig sets kubeconfig_file in the in-cluster Kubernetes service
// discovery entries of config.
func withKubeconfig(config []byte, kubeconfig string) ([]byte, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(config, &doc); err != nil {
		return nil, fmt.Errorf("prometheus: the configuration is not YAML: %w", err)
	}
	jobs, _ := doc["scrape_configs"].([]any)
	for _, j := range jobs {
		job, _ := j.(map[string]any)
		sds, _ := job["kubernetes_sd_configs"].([]any)
		for _, sd := range sds {
			m, ok := sd.(map[string]any)
			if !ok {
				continue
			}
			if _, ok := m["api_server"]; ok {
				continue
			}
			if _, ok := m["kubeconfig_file"]; ok {
				continue
			}
			m["kubeconfig_file"] = kubeconfig
		}
	}
	return yaml.Marshal(doc)
}

// waitReady polls /-/ready until it answers 200, the process exits, or ctx
// ends.
func (s *Server) waitReady(ctx context.Context) error {
	var last error
	for {
		select {
		case <-s.done:
			return s.failure(fmt.Errorf("prometheus: exited during start: %v", s.err))
		default:
		}
		last = s.get(ctx, "/-/ready", nil)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return s.failure(fmt.Errorf("prometheus: not ready: %w (last: %v)", ctx.Err(), last))
		case <-s.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// failure wraps err with the last lines of the server's log.
func (s *Server) failure(err error) error {
	return fmt.Errorf("%w\n--- last lines of %s ---\n%s", err, s.logPath, s.LogTail(30))
}

// LogTail returns the last n lines of the server's log, for messages.
func (s *Server) LogTail(n int) string {
	data, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", s.logPath, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// URL is the server's base URL, http://127.0.0.1:<port>; its HTTP API is
// under /api/v1.
func (s *Server) URL() string { return s.url }

// ConfigFile is the configuration file the server reads, as written (with
// WithKubeconfig applied).
func (s *Server) ConfigFile() string { return s.configFile }

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Reload replaces the configuration with config (WithKubeconfig applies
// again) and asks the server to load it. It returns the server's error when
// the server refuses the configuration, which it then keeps running with the
// old one.
func (s *Server) Reload(ctx context.Context, config []byte) error {
	if err := s.writeConfig(config); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/-/reload", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("prometheus: reload: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("prometheus: reload: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// Stop ends the server (SIGTERM, then SIGKILL after 10 s) and removes its
// directory. It is safe to call more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		if s.cmd != nil && s.cmd.Process != nil {
			pgid := s.cmd.Process.Pid
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				<-s.done
			}
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		if s.port != 0 {
			freeport.Release(s.port)
		}
		if err := os.RemoveAll(s.dir); err != nil {
			s.stopErr = fmt.Errorf("prometheus: removing %s: %w", s.dir, err)
		}
	})
	return s.stopErr
}
