package suite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/handlerkit/handlerkit/bench/internal/workload"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// Run prepares the workloads on env and runs cfg.Runs interleaved runs of
// the chosen scenarios. When a session fails, it returns the results so
// far with the error. The executable must call
// session.RunChildIfRequested first thing, as it runs the contenders.
func Run(ctx context.Context, env *testenv.Environment, cfg Config) (*Results, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, results: &Results{Config: cfg, Started: time.Now()}}
	r.results.Machine = describeMachine()
	r.results.Versions = describeVersions(env.Config())
	dir, err := os.MkdirTemp("", "handlerkit-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if r.kubeconfig, err = writeKubeconfig(env.Config(), filepath.Join(dir, "kubeconfig")); err != nil {
		return nil, err
	}
	if r.writer, err = newWriter(env.Config()); err != nil {
		return nil, err
	}
	if err := r.prepare(ctx, env); err != nil {
		return nil, err
	}
	for run := 1; run <= cfg.Runs; run++ {
		for _, scenario := range AllScenarios {
			if !cfg.has(scenario) {
				continue
			}
			sessions := rotate(cfg.selected(Rows(scenario, cfg)), run-1)
			for _, s := range sessions {
				r.results.LoadAverages = append(r.results.LoadAverages, loadAverage())
				start := time.Now()
				if err := r.session(ctx, scenario, run, s); err != nil {
					err = fmt.Errorf("run %d, %s, %s: %w", run, scenario, s, err)
					r.results.Notes = append(r.results.Notes, "stopped early: "+err.Error())
					r.results.Finished = time.Now()
					return r.results, err
				}
				r.progress("run %d/%d %-10s %-45s %5.1fs  load %.2f", run, cfg.Runs, scenario, s, time.Since(start).Seconds(), loadAverage())
			}
		}
	}
	r.results.Finished = time.Now()
	return r.results, nil
}

type runner struct {
	cfg        Config
	results    *Results
	kubeconfig string
	writer     workload.Writer
	steadyNS   string // Objects exporters with settled statuses
	podsNS     string // Pods Pods, for the memory scenario
	podLoadNS  string // Pods Pods, for the pods scenario, which annotates them
}

// prepare installs the CRD and creates the workloads that sessions share.
func (r *runner) prepare(ctx context.Context, env *testenv.Environment) error {
	crdDir, err := findCRDDir()
	if err != nil {
		return err
	}
	crds, err := testenv.ReadCRDs(crdDir)
	if err != nil {
		return err
	}
	if err := env.InstallCRDs(ctx, crds...); err != nil {
		return err
	}
	if r.cfg.has(ScenarioSteady) {
		start := time.Now()
		if r.steadyNS, err = r.writer.Namespace(ctx, "bench-steady-"); err != nil {
			return err
		}
		if err := r.writer.CreateConfigMap(ctx, r.steadyNS); err != nil {
			return err
		}
		if err := r.writer.CreateExporters(ctx, r.steadyNS, r.cfg.Objects); err != nil {
			return err
		}
		if err := r.writer.SettleStatuses(ctx, r.steadyNS); err != nil {
			return err
		}
		r.progress("prepared %d exporters with settled statuses in %s (%.1fs)", r.cfg.Objects, r.steadyNS, time.Since(start).Seconds())
	}
	if r.cfg.has(ScenarioMemory) {
		start := time.Now()
		if r.podsNS, err = r.writer.Namespace(ctx, "bench-pods-"); err != nil {
			return err
		}
		if err := r.writer.CreatePods(ctx, r.podsNS, r.cfg.Pods); err != nil {
			return err
		}
		r.progress("prepared %d pods in %s (%.1fs)", r.cfg.Pods, r.podsNS, time.Since(start).Seconds())
	}
	if r.cfg.has(ScenarioPods) {
		start := time.Now()
		if r.podLoadNS, err = r.writer.Namespace(ctx, "bench-podload-"); err != nil {
			return err
		}
		if err := r.writer.CreatePods(ctx, r.podLoadNS, r.cfg.Pods); err != nil {
			return err
		}
		r.progress("prepared %d pods in %s (%.1fs)", r.cfg.Pods, r.podLoadNS, time.Since(start).Seconds())
	}
	return nil
}

func (r *runner) progress(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, format+"\n", args...)
	}
}

// newWriter builds the load generator's clients, without client-side rate
// limiting: the load generator must never be what limits a contender.
func newWriter(cfg *rest.Config) (workload.Writer, error) {
	cfg.QPS, cfg.Burst = -1, 0
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return workload.Writer{}, err
	}
	jmx, err := versioned.NewForConfig(cfg)
	if err != nil {
		return workload.Writer{}, err
	}
	return workload.Writer{Kube: kube, JMX: jmx}, nil
}

// writeKubeconfig writes cfg's address and client certificate to path for
// the contender processes.
func writeKubeconfig(cfg *rest.Config, path string) (string, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["bench"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, CertificateAuthority: cfg.CAFile}
	kc.AuthInfos["bench"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData,
		ClientCertificate: cfg.CertFile, ClientKey: cfg.KeyFile, Token: cfg.BearerToken,
	}
	kc.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "bench"}
	kc.CurrentContext = "bench"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("suite: write kubeconfig: %w", err)
	}
	return path, nil
}

// findCRDDir finds deploy/crds of the handlerkit checkout above the working
// directory.
func findCRDDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		candidate := filepath.Join(dir, "deploy", "crds")
		if _, err := os.Stat(filepath.Join(candidate, "jmx.handlerkit.dev_prometheusjmxexporters.yaml")); err == nil {
			return candidate, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("suite: no deploy/crds above the working directory; run inside the handlerkit checkout")
		}
		dir = parent
	}
}

// loadAverage is the machine's 1-minute load average, or -1.
func loadAverage() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// rotate starts the list k places later, so that no contender always goes
// first (or right after the same neighbour) in every run.
func rotate[T any](list []T, k int) []T {
	if len(list) == 0 {
		return list
	}
	k = (k * (len(list) + 1) / 2) % len(list)
	return append(append([]T(nil), list[k:]...), list[:k]...)
}
