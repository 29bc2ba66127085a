package prometheus_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/testenv"
	"github.com/handlerkit/handlerkit/pkg/testenv/prometheus"
)

// childEnvVar makes the test binary start a server, report it and wait to be
// killed (TestServerDiesWithTheTestBinary).
const childEnvVar = "HANDLERKIT_PROMETHEUS_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnvVar) != "" {
		runChild()
		return
	}
	os.Exit(m.Run())
}

// serveMetrics serves a fixed exposition on a free 127.0.0.1 port and
// returns the port.
func serveMetrics(t *testing.T, body string) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprint(w, body)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// podsJob is an in-cluster pod discovery job limited to one namespace,
// scraping each declared container port of pods not labelled skip=true.
func podsJob(ns string) string {
	return fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
- job_name: pods
  kubernetes_sd_configs:
  - role: pod
    namespaces:
      names: [%s]
  relabel_configs:
  - source_labels: [__meta_kubernetes_pod_label_skip]
    regex: "true"
    action: drop
  - source_labels: [__meta_kubernetes_pod_name]
    target_label: pod
`, ns)
}

// TestDiscoversPodsThroughTheKubeconfigAndAnswersQueries runs the real server
// against a control plane: a Pod whose status names 127.0.0.1 as its IP and
// declares the port of a metrics server in this test is discovered through
// the kubeconfig, scraped, queried, listed as a target, and dropped again
// after a reload; a second one that the relabeling drops is listed as
// dropped.
func TestDiscoversPodsThroughTheKubeconfigAndAnswersQueries(t *testing.T) {
	env := testenv.New(t)
	ctx := t.Context()
	ns, err := env.CreateNamespace(ctx, "prom")
	if err != nil {
		t.Fatal(err)
	}
	port := serveMetrics(t, "# TYPE handlerkit_probe_value gauge\nhandlerkit_probe_value{kind=\"test\"} 42\n")
	for name, labels := range map[string]map[string]string{"metrics": nil, "skipped": {"skip": "true"}} {
		pod, err := env.Clientset().CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "none",
				Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: int32(port)}}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}}}
		if _, err := env.Clientset().CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig, err := env.KubeconfigFile()
	if err != nil {
		t.Fatal(err)
	}

	srv := prometheus.New(t, []byte(podsJob(ns)), prometheus.WithKubeconfig(kubeconfig))
	cfg, err := os.ReadFile(srv.ConfigFile())
	if err != nil || !strings.Contains(string(cfg), "kubeconfig_file: "+kubeconfig) {
		t.Fatalf("the written config does not name the kubeconfig (%v):\n%s", err, cfg)
	}
	var got []prometheus.Sample
	waitFor(t, time.Minute, "the pod's series", func() (bool, string) {
		got, err = srv.Query(ctx, `handlerkit_probe_value * on (instance) group_left up{job="pods"}`)
		return err == nil && len(got) == 1, fmt.Sprintf("%v %v", got, err)
	})
	if s := got[0]; s.Value != 42 || s.Metric["pod"] != "metrics" || s.Metric["kind"] != "test" ||
		s.Metric["instance"] != "127.0.0.1:"+strconv.Itoa(port) || time.Since(s.Time) > time.Minute {
		t.Errorf("sample %+v, want 42 from pod metrics at 127.0.0.1:%d", s, port)
	}
	targets, err := srv.Targets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(targets) != 1 || targets[0].Health != "up" || targets[0].ScrapePool != "pods" ||
		targets[0].DiscoveredLabels["__meta_kubernetes_pod_container_port_name"] != "metrics" ||
		targets[0].ScrapeURL != fmt.Sprintf("http://127.0.0.1:%d/metrics", port) {
		t.Errorf("targets %+v", targets)
	}
	waitFor(t, 30*time.Second, "the pod labelled skip=true among the dropped targets", func() (bool, string) {
		dropped, err := srv.DroppedTargets(ctx)
		return err == nil && len(dropped) == 1 && dropped[0].DiscoveredLabels["__meta_kubernetes_pod_name"] == "skipped" &&
			dropped[0].ScrapePool == "pods", fmt.Sprintf("%+v %v", dropped, err)
	})
	names, err := srv.MetricNames(ctx)
	if err != nil || !contains(names, "handlerkit_probe_value") || !contains(names, "up") {
		t.Errorf("metric names %v (%v)", names, err)
	}
	if _, err := srv.Query(ctx, "sum(("); err == nil || !strings.Contains(err.Error(), "parse") {
		t.Errorf("a query that does not parse: %v, want the server's parse error", err)
	}

	// A refused configuration leaves the old one running; a good one
	// replaces it.
	if err := srv.Reload(ctx, []byte("scrape_configs: [{job_name: x, bogus: 1}]\n")); err == nil {
		t.Error("Reload accepted a configuration Prometheus cannot load")
	}
	if err := srv.Reload(ctx, []byte("global: {scrape_interval: 1s}\nscrape_configs: []\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "no targets after the reload", func() (bool, string) {
		targets, err := srv.Targets(ctx)
		return err == nil && len(targets) == 0, fmt.Sprintf("%v %v", targets, err)
	})
}

func TestStopLeavesNoProcessOrDirectory(t *testing.T) {
	srv, err := prometheus.Start(t.Context(), []byte("scrape_configs: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	pid, dir := srv.Pid(), dirOf(srv)
	if !alive(pid) {
		t.Fatalf("pid %d not running", pid)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Errorf("pid %d still runs after Stop", pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists after Stop: %v", dir, err)
	}
	if err := srv.Stop(); err != nil {
		t.Errorf("a second Stop: %v", err)
	}
}

func TestBadConfigurationFailsStartWithTheLog(t *testing.T) {
	_, err := prometheus.Start(t.Context(), []byte("scrape_configs: [{job_name: x, bogus: 1}]\n"))
	if err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("want an error quoting the log about the bad field, got %v", err)
	}
}

// TestServerDiesWithTheTestBinary kills (SIGKILL) a test binary that
// started a server: the server goes with it, and the next Start removes its
// directory.
func TestServerDiesWithTheTestBinary(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnvVar+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var pid int
	var dir string
	scanner := bufio.NewScanner(out)
	for scanner.Scan() {
		field, value, _ := strings.Cut(scanner.Text(), " ")
		switch field {
		case "pid":
			pid, _ = strconv.Atoi(value)
		case "dir":
			dir = value
		case "error":
			t.Fatalf("child: %s", value)
		}
		if field == "ready" {
			break
		}
	}
	if pid == 0 || dir == "" || !alive(pid) {
		t.Fatalf("child reported pid %d dir %q", pid, dir)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitFor(t, 20*time.Second, "the server to die with the binary", func() (bool, string) { return !alive(pid), "alive" })
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the killed binary's directory should remain until the next Start: %v", err)
	}
	srv, err := prometheus.Start(t.Context(), []byte("scrape_configs: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Start did not remove %s, left by a killed test binary: %v", dir, err)
	}
}

func runChild() {
	srv, err := prometheus.Start(context.Background(), []byte("scrape_configs: []\n"))
	if err != nil {
		fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " | "))
		os.Exit(1)
	}
	fmt.Println("pid", srv.Pid())
	fmt.Println("dir", dirOf(srv))
	fmt.Println("ready")
	select {}
}

// dirOf is the server's directory, the one holding its configuration.
func dirOf(s *prometheus.Server) string {
	return strings.TrimSuffix(s.ConfigFile(), "/prometheus.yml")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// waitFor polls cond every 200 ms until it holds, failing the test after
// timeout with the last state cond described.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, state)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("cancelled waiting for %s; last: %s", what, state)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
