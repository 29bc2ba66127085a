// Command prometheus-jmx-exporter-operator loads the Prometheus JMX exporter
// java agent into the running JVMs of the pods that PrometheusJmxExporter
// resources select, without restarting them, and annotates the pods so that
// Prometheus scrapes them. See docs/operator.md.
//
// Every flag can also be set through the environment variable named in its
// help (flags win). Run with --help for the list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/sirupsen/logrus"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/handlerkit/handlerkit/internal/buildinfo"
	"github.com/handlerkit/handlerkit/internal/memlimit"
	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/leader"
	"github.com/handlerkit/handlerkit/pkg/metrics"
	"github.com/handlerkit/handlerkit/pkg/operator"
	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// config is the parsed command line.
type config struct {
	namespaces      string
	kubeconfig      string
	metricsAddr     string
	election        string
	lockName        string
	logLevel        string
	logFormat       string
	defaultStrategy string
	strategies      string
	timeout         time.Duration
	parallelism     int
	jvmWait         time.Duration
	lateJVMInterval time.Duration
	kubeAPIQPS      float64
	kubeAPIBurst    int
	breakerWindow   time.Duration
	replacementWait time.Duration
	resync          time.Duration
	budget          int
	maxAttempts     int
	agentImage      string
	agentImageSet   bool // --agent-image or AGENT_IMAGE given: no own-image lookup
	allowedImages   []string
	agentPath       string
	attachHelper    string
	pullPolicy      string
	localHelper     string
	localJar        string
	gracefulTimeout time.Duration
	podMonitors     bool
	reportUnserved  bool
	podMonLabels    map[string]string
	svcMonLabels    map[string]string
	metricsService  string
	webhook         webhookConfig
}

// The values of --metrics-service.
const (
	metricsServiceEveryReplica = "every-replica"
	metricsServiceLeader       = "leader"
	metricsServiceNone         = "none"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without os.Exit, for tests: 0 ok, 1 failed, 2 bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) || errors.Is(err, errVersion) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "prometheus-jmx-exporter-operator:", err)
		fmt.Fprintln(stderr, "Run prometheus-jmx-exporter-operator --help for the flags.")
		return 2
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "prometheus-jmx-exporter-operator:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := operate(ctx, cfg, log); err != nil {
		log.WithError(err).Error("operator stopped")
		return 1
	}
	return 0
}

// envName finds the environment variable a flag's help names ("(env X)").
var envName = regexp.MustCompile(`\(env ([A-Z][A-Z0-9_]*)\)`)

// applyEnv sets every flag that the command line left unset from the
// environment variable its help names, when that variable is set and not
// empty. A value the flag would refuse is an error in the flag package's own
// words, so that POD_MONITORS=flase fails exactly as --pod-monitors=flase
// does.
func applyEnv(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		m := envName.FindStringSubmatch(f.Usage)
		if err != nil || set[f.Name] || m == nil {
			return
		}
		v, ok := os.LookupEnv(m[1])
		if !ok || v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("invalid value %q for environment variable %s (flag -%s): %v", v, m[1], f.Name, serr)
		}
	})
	return err
}

// defaultKubeAPIQPS is --kube-api-qps's default: no client-side limit. The
// operator's requests in flight are bounded by its pool (--parallelism jobs
// of a few requests each, one after another) and its paced status writes,
// and the API server's priority and fairness paces every client; a limit of
// 50 requests a second (the framework's sdk.DefaultClientQPS) held 10,000
// container starts, about six requests each, to at least 20 minutes
// (docs/performance.md, The operator at scale).
const defaultKubeAPIQPS = -1

func parseFlags(args []string, stdout io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("prometheus-jmx-exporter-operator", flag.ContinueOnError)
	// The flag package's own messages are not printed: run prints the
	// error, and --help goes to stdout.
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.namespaces, "namespaces", "",
		"namespaces to watch: one, a comma-separated list, or empty for all (env WATCH_NAMESPACE)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "",
		"kubeconfig file; empty: the in-cluster configuration (env KUBECONFIG)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", sdk.DefaultMetricsAddr,
		"address of /metrics, /healthz and /readyz, served on every replica; 0 disables (env METRICS_ADDR)")
	fs.StringVar(&c.election, "leader-election", "lease",
		"leader election: lease (fast takeover), for-life (a lock ConfigMap owned by the leader's pod), or none for a single replica (env LEADER_ELECTION)")
	fs.StringVar(&c.lockName, "leader-lock", "prometheus-jmx-exporter-operator",
		"name of the Lease or lock ConfigMap in the operator's namespace (POD_NAMESPACE) (env LEADER_LOCK)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error (env LOG_LEVEL)")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json (env LOG_FORMAT)")
	fs.StringVar(&c.defaultStrategy, "default-strategy", string(jmxv1alpha1.DefaultInjectionStrategy),
		"strategy for exporters stored without spec.injection.strategy (the CRD's schema default, EphemeralContainer, normally fills it in): EphemeralContainer or Exec (env DEFAULT_STRATEGY)")
	fs.StringVar(&c.strategies, "strategies", string(jmxv1alpha1.InjectionEphemeralContainer),
		"strategies this operator may use, comma-separated: EphemeralContainer, Exec; Exec is opt-in (it also needs the pods/exec RBAC); grant RBAC only for these (env STRATEGIES)")
	fs.DurationVar(&c.timeout, "injection-timeout", operator.DefaultInjectionTimeout,
		"time limit of one injection of one container (env INJECTION_TIMEOUT)")
	fs.IntVar(&c.parallelism, "parallelism", operator.DefaultParallelism,
		"injection jobs that work the API at once (reading the pod, adding the ephemeral container or exec, writing the record); waiting for a JVM holds no slot; slots go round-robin between exporters (env PARALLELISM)")
	fs.DurationVar(&c.jvmWait, "jvm-wait", operator.DefaultJVMWait,
		"how long after a container starts a JVM may take to appear in it (env JVM_WAIT)")
	fs.DurationVar(&c.lateJVMInterval, "late-jvm-interval", operator.DefaultLateJVMInterval,
		"a container without a JVM after --jvm-wait is looked at again this long after, then twice as long after each look, up to 1h, at most 6 times; 0: only at its restart (env LATE_JVM_INTERVAL)")
	fs.Float64Var(&c.kubeAPIQPS, "kube-api-qps", defaultKubeAPIQPS,
		"steady rate of the operator's requests to the API server, per second; negative (the default): no client-side limit, --parallelism bounds the injection jobs' requests in flight and the API server's priority and fairness paces them (env KUBE_API_QPS)")
	fs.IntVar(&c.kubeAPIBurst, "kube-api-burst", sdk.DefaultClientBurst,
		"with a positive --kube-api-qps, the requests the operator may send at once above it (env KUBE_API_BURST)")
	fs.DurationVar(&c.resync, "resync", 10*time.Minute,
		"how often every exporter is handled again when nothing changed; 0 never (env RESYNC)")
	fs.DurationVar(&c.breakerWindow, "breaker-window", operator.DefaultBreakerWindow,
		"a JVM that ends within this time after a load opens its exporter's circuit breaker; a change of an exporter's spec or config is tried on one container for this long before the others (env BREAKER_WINDOW)")
	fs.DurationVar(&c.replacementWait, "replacement-wait", operator.DefaultReplacementWait,
		"restartOnRefusal: how long an evicted pod's replacement may take to appear (after the pod is gone) and to run and be ready (after its creation); past it the operator stops evicting that exporter's pods until its spec changes (env REPLACEMENT_WAIT)")
	fs.IntVar(&c.budget, "ephemeral-container-budget", operator.DefaultEphemeralContainerBudget,
		"ephemeral containers the operator adds to one pod in the pod's whole life, injections and reconfigurations together; past it the pod is reported, not patched (env EPHEMERAL_CONTAINER_BUDGET)")
	fs.IntVar(&c.maxAttempts, "max-attempts", operator.DefaultMaxAttempts,
		"transiently failed attempts allowed on one container start, with either strategy, and reloads of one config on one container start; then TooManyAttempts (env MAX_ATTEMPTS)")
	fs.StringVar(&c.agentImage, "agent-image", jmxv1alpha1.DefaultAgentImage,
		"agent image of the EphemeralContainer strategy, for exporters that leave spec.agent.image empty, and always allowed; when not set, the operator's own image, read from its pod (POD_NAMESPACE, POD_NAME), and this default only outside a cluster (env AGENT_IMAGE)")
	allowed := fs.String("allowed-agent-images", "",
		"other agent images exporters may name in spec.agent.image, comma-separated exact references; --agent-image is always allowed, and is the only one by default; an exporter naming any other image is refused (Degraded=True, AgentImageNotAllowed) (env ALLOWED_AGENT_IMAGES)")
	fs.StringVar(&c.agentPath, "agent-path", jmxv1alpha1.DefaultAgentPath,
		"agent jar's path in every allowed agent image; exporters cannot change it (env AGENT_PATH)")
	fs.StringVar(&c.attachHelper, "attach-helper-path", jmxv1alpha1.DefaultAttachHelperPath,
		"jmx-attach's path in every allowed agent image; exporters cannot change it (env ATTACH_HELPER_PATH)")
	fs.StringVar(&c.pullPolicy, "image-pull-policy", string(corev1.PullIfNotPresent),
		"pull policy of the agent image: Always, IfNotPresent or Never (env IMAGE_PULL_POLICY)")
	fs.StringVar(&c.localHelper, "local-attach-helper", jmxv1alpha1.DefaultAttachHelperPath,
		"the operator's own jmx-attach, which the Exec strategy streams into containers (env LOCAL_ATTACH_HELPER)")
	fs.StringVar(&c.localJar, "local-agent-jar", jmxv1alpha1.DefaultAgentPath,
		"the operator's own agent jar, which the Exec strategy streams into containers (env LOCAL_AGENT_JAR)")
	fs.DurationVar(&c.gracefulTimeout, "graceful-timeout", 30*time.Second,
		"how long handlers may run on after shutdown or a lost leadership (env GRACEFUL_TIMEOUT)")
	fs.BoolVar(&c.podMonitors, "pod-monitors", true,
		"keep one PodMonitor per exporter, scraping each injected JVM once, when the cluster serves monitoring.coreos.com/v1 PodMonitors (checked at start) (env POD_MONITORS)")
	podMonLabels := fs.String("pod-monitor-labels", "",
		"labels added to every PodMonitor, k=v comma-separated, for a Prometheus whose podMonitorSelector asks for them (env POD_MONITOR_LABELS)")
	fs.BoolVar(&c.reportUnserved, "report-unserved", true,
		"when --namespaces lists namespaces, watch the exporters of every other namespace read-only and set NotServed=True on them, naming the served ones; needs a ClusterRole (get, list, watch exporters; update exporters/status); false keeps the operator strictly namespaced (env REPORT_UNSERVED)")
	fs.StringVar(&c.metricsService, "metrics-service", metricsServiceEveryReplica,
		"the <deployment>-metrics Service in the operator's namespace (and a ServiceMonitor when the cluster serves them), written at start: every-replica, leader (only the leader is scraped) or none (env METRICS_SERVICE)")
	svcMonLabels := fs.String("service-monitor-labels", "",
		"labels on the operator's own ServiceMonitor (see --metrics-service), k=v comma-separated, for a Prometheus whose serviceMonitorSelector asks for them; not app.kubernetes.io/name or app.kubernetes.io/component, which the operator sets (env SERVICE_MONITOR_LABELS)")
	webhookFlags(fs, &c.webhook)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: prometheus-jmx-exporter-operator [flags]

Loads the Prometheus JMX exporter java agent into the running JVMs of the pods
that PrometheusJmxExporter resources (jmx.handlerkit.dev/v1alpha1) select, with
no restart, annotates the pods for Prometheus (prometheus.io/scrape, port,
path) and reports every endpoint in the exporter's status. Serves /metrics,
/healthz and /readyz on every replica; with leader election only the leader
acts. Every replica also serves the admission webhook that gives the agent
to new pods at their start (exporters with spec.injection.mode AtStart or
Both; --webhook). See docs/operator.md.

Flags (each also from the environment variable in parentheses; flags win):
`)
		fs.PrintDefaults()
	}
	version := fs.Bool("version", false, "print the version, the commit and the Go version, and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
		}
		return c, err
	}
	if *version {
		fmt.Fprintln(stdout, versionLine())
		return c, errVersion
	}
	if err := applyEnv(fs); err != nil {
		return c, err
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "agent-image" {
			c.agentImageSet = true
		}
		if f.Name == "webhook" {
			c.webhook.set = true
		}
	})
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q (see --help)", fs.Args())
	}
	switch c.election {
	case "lease", "for-life", "none":
	default:
		return c, fmt.Errorf("--leader-election %q: want lease, for-life or none", c.election)
	}
	switch c.logFormat {
	case "text", "json":
	default:
		return c, fmt.Errorf("--log-format %q: want text or json", c.logFormat)
	}
	if _, err := strategies(c.strategies); err != nil {
		return c, err
	}
	if s := jmxv1alpha1.InjectionStrategy(c.defaultStrategy); s != jmxv1alpha1.InjectionExec && s != jmxv1alpha1.InjectionEphemeralContainer {
		return c, fmt.Errorf("--default-strategy %q: want EphemeralContainer or Exec", c.defaultStrategy)
	}
	switch corev1.PullPolicy(c.pullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return c, fmt.Errorf("--image-pull-policy %q: want Always, IfNotPresent or Never", c.pullPolicy)
	}
	if c.timeout < 10*time.Second {
		return c, fmt.Errorf("--injection-timeout %s: at least 10s", c.timeout)
	}
	if c.parallelism < 1 {
		return c, fmt.Errorf("--parallelism %d: at least 1", c.parallelism)
	}
	if c.kubeAPIQPS == 0 {
		return c, errors.New("--kube-api-qps 0: a positive rate, or a negative one for no client-side limit")
	}
	if c.kubeAPIBurst < 1 {
		return c, fmt.Errorf("--kube-api-burst %d: at least 1", c.kubeAPIBurst)
	}
	if c.lateJVMInterval < 0 || c.lateJVMInterval > 0 && c.lateJVMInterval < time.Minute {
		return c, fmt.Errorf("--late-jvm-interval %s: 0 (off) or at least 1m", c.lateJVMInterval)
	}
	if c.breakerWindow < time.Second {
		return c, fmt.Errorf("--breaker-window %s: at least 1s", c.breakerWindow)
	}
	if c.replacementWait < time.Second {
		return c, fmt.Errorf("--replacement-wait %s: at least 1s", c.replacementWait)
	}
	if c.budget < 1 {
		return c, fmt.Errorf("--ephemeral-container-budget %d: at least 1", c.budget)
	}
	if c.maxAttempts < 1 {
		return c, fmt.Errorf("--max-attempts %d: at least 1", c.maxAttempts)
	}
	images, err := imageList(*allowed)
	if err != nil {
		return c, fmt.Errorf("--allowed-agent-images: %w", err)
	}
	c.allowedImages = images
	labels, err := parseLabels(*podMonLabels)
	if err != nil {
		return c, fmt.Errorf("--pod-monitor-labels: %w", err)
	}
	c.podMonLabels = labels
	if labels, err = parseLabels(*svcMonLabels); err != nil {
		return c, fmt.Errorf("--service-monitor-labels: %w", err)
	}
	if err := metrics.ValidateServiceMonitorLabels(labels); err != nil {
		return c, fmt.Errorf("--service-monitor-labels: %w", err)
	}
	c.svcMonLabels = labels
	switch c.metricsService {
	case metricsServiceEveryReplica, metricsServiceNone:
	case metricsServiceLeader:
		if c.election == "none" {
			return c, errors.New("--metrics-service=leader selects the leader by its leader label, which --leader-election=none never sets; use every-replica")
		}
	default:
		return c, fmt.Errorf("--metrics-service %q: want every-replica, leader or none", c.metricsService)
	}
	if err := c.webhook.check(); err != nil {
		return c, err
	}
	return c, nil
}

// parseLabels parses "k=v,k2=v2" into label keys and values Kubernetes
// accepts.
func parseLabels(list string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(list, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			return nil, fmt.Errorf("label key %q: %s", k, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			return nil, fmt.Errorf("label value %q: %s", v, strings.Join(msgs, "; "))
		}
		out[k] = v
	}
	return out, nil
}

// imageList parses "ref,ref2" into image references: each non-empty,
// without spaces inside. References are compared exactly, so a tag and a
// digest of the same image are two entries.
func imageList(list string) ([]string, error) {
	var out []string
	for _, ref := range strings.Split(list, ",") {
		ref = strings.TrimSpace(ref)
		if ref == "" {
			continue
		}
		if strings.ContainsAny(ref, " \t\n") {
			return nil, fmt.Errorf("%q is not an image reference", ref)
		}
		out = append(out, ref)
	}
	return out, nil
}

// strategies parses --strategies into the enabled set.
func strategies(list string) (map[jmxv1alpha1.InjectionStrategy]bool, error) {
	out := map[jmxv1alpha1.InjectionStrategy]bool{}
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		switch jmxv1alpha1.InjectionStrategy(s) {
		case jmxv1alpha1.InjectionExec, jmxv1alpha1.InjectionEphemeralContainer:
			out[jmxv1alpha1.InjectionStrategy(s)] = true
		case "":
		default:
			return nil, fmt.Errorf("--strategies: unknown strategy %q (want EphemeralContainer, Exec)", s)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--strategies: enable at least one strategy")
	}
	return out, nil
}

func newLogger(c config, out io.Writer) (*logrus.Logger, error) {
	l := logrus.New()
	l.SetOutput(out)
	lvl, err := logrus.ParseLevel(c.logLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	l.SetLevel(lvl)
	if c.logFormat == "json" {
		l.SetFormatter(&logrus.JSONFormatter{})
	} else {
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	}
	return l, nil
}

func restConfig(c config) (*rest.Config, error) {
	if c.kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
	}
	return cfg, nil
}

func operate(ctx context.Context, c config, log *logrus.Logger) error {
	cfg, err := restConfig(c)
	if err != nil {
		return err
	}
	// A soft memory limit under the container's: the garbage collector
	// works harder near it rather than the kernel killing the operator
	// (docs/operator.md, Memory at scale).
	if soft, hard, err := memlimit.Set("/sys/fs/cgroup"); err != nil {
		log.Warnf("no soft memory limit: %v", err)
	} else if soft > 0 {
		log.Infof("Go's soft memory limit: %d MiB, %.0f%% of the container's %d MiB (GOMEMLIMIT overrides)",
			soft>>20, memlimit.Ratio*100, hard>>20)
	}
	scheme, err := operator.Scheme()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newBuildInfo())
	opts := []sdk.Option{
		sdk.WithScheme(scheme), sdk.WithRegisterer(reg), sdk.WithGatherer(reg),
		sdk.WithMetricsAddr(c.metricsAddr), sdk.WithLogger(log),
		sdk.WithEventSource("prometheus-jmx-exporter-operator"),
		sdk.WithGracefulTimeout(c.gracefulTimeout),
		sdk.WithClientRateLimit(float32(c.kubeAPIQPS), c.kubeAPIBurst),
	}
	// The operator's Deployment owns the Lease and the webhook's Secret, so
	// that an uninstall leaves neither (docs/install.md, Uninstall).
	var owner *metav1.OwnerReference
	if c.election == "lease" || (c.webhook.on() && !c.webhook.externalCerts) {
		owner = ownDeployment(ctx, cfg, log)
	}
	lopts := []leader.Option{leader.WithRegisterer(reg), leader.WithLogger(log), leader.WithOwner(owner)}
	switch c.election {
	case "lease":
		e, err := leader.NewLease(cfg, c.lockName, lopts...)
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		opts = append(opts, sdk.WithElector(e))
	case "for-life":
		e, err := leader.NewForLife(cfg, c.lockName, lopts...)
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		opts = append(opts, sdk.WithElector(e))
	}
	var hook *webhookRun
	if c.webhook.on() {
		// The webhook's parts are made before the Operator, so that its
		// certificates are part of /readyz on every replica.
		if hook, err = newWebhook(ctx, cfg, c, owner, reg, log); err != nil {
			return err
		}
		if hook != nil {
			opts = append(opts, sdk.WithReadyCheck(hook.ready))
		}
	}
	op, err := sdk.New(cfg, opts...)
	if err != nil {
		return err
	}
	agentImage, why, err := chooseAgentImage(ctx, op.Clientset(), c)
	if err != nil {
		return err
	}
	log.WithFields(logrus.Fields{"agentImage": agentImage, "why": why}).Info("agent image chosen")
	reportUnserved := c.reportUnserved && c.namespaces != "" && unservedGranted(ctx, op.Clientset(), log)
	enabled, _ := strategies(c.strategies)
	var disabled []jmxv1alpha1.InjectionStrategy
	for _, s := range []jmxv1alpha1.InjectionStrategy{jmxv1alpha1.InjectionEphemeralContainer, jmxv1alpha1.InjectionExec} {
		if !enabled[s] {
			disabled = append(disabled, s)
		}
	}
	r, err := operator.Setup(op, operator.Options{
		Namespaces:         c.namespaces,
		DefaultStrategy:    jmxv1alpha1.InjectionStrategy(c.defaultStrategy),
		DisabledStrategies: disabled,
		AgentImage:         agentImage, AgentPath: c.agentPath, AttachHelperPath: c.attachHelper,
		AllowedAgentImages: c.allowedImages,
		PullPolicy:         corev1.PullPolicy(c.pullPolicy),
		LocalAttachHelper:  c.localHelper, LocalAgentJar: c.localJar,
		InjectionTimeout: c.timeout, Parallelism: c.parallelism, JVMWait: c.jvmWait, LateJVMInterval: lateJVMInterval(c.lateJVMInterval),
		BreakerWindow: c.breakerWindow, ReplacementWait: c.replacementWait, Resync: c.resync, EphemeralContainerBudget: c.budget, MaxAttempts: c.maxAttempts,
		ReportUnserved:     reportUnserved,
		DisablePodMonitors: !c.podMonitors, PodMonitorLabels: c.podMonLabels,
		AtStartDelivery: c.webhook.atstartDelivery(), NoWebhook: hook == nil,
	})
	if err != nil {
		return err
	}
	if hook != nil {
		// Every replica, leader or not, serves the webhook; it stops with
		// ctx, after the operator.
		stopHook, err := hook.start(ctx, r.AtStartInput)
		if err != nil {
			return err
		}
		defer stopHook()
		// A replica that does not lead answers from a cache of the
		// exporters, not a list per pod created (RunAdmissionCache).
		cacheDone := make(chan struct{})
		go func() {
			defer close(cacheDone)
			if err := r.RunAdmissionCache(ctx); err != nil {
				log.WithError(err).Error("the webhook's exporter cache stopped; a replica that does not lead reads the exporters from the API server")
			}
		}()
		defer func() { <-cacheDone }()
	}
	ensureMetricsService(ctx, cfg, c, log)
	bi := buildinfo.Get()
	log.WithFields(logrus.Fields{"version": bi.Version, "commit": bi.Commit, "built": bi.Date,
		"namespaces": nsLabel(c.namespaces), "election": c.election,
		"strategies": c.strategies, "default": c.defaultStrategy, "agentImage": agentImage,
		"allowedAgentImages": strings.Join(c.allowedImages, ","), "webhook": hook != nil}).Info("prometheus-jmx-exporter-operator starting")
	err = op.Run(ctx)
	r.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// chooseAgentImage returns the agent image and why it is that one: the one
// --agent-image (or AGENT_IMAGE) names when it is given; otherwise the
// operator's own image, read from its pod (POD_NAMESPACE and POD_NAME, from
// the downward API in the manifests), because the release image holds the
// operator, jmx-attach and the agent jar, and a mirror or a kustomize images:
// rewrite that moves the operator so moves the agent; the built-in default
// only where there is no own pod to read (run outside a cluster). An own pod
// that cannot be read is an error, not the default: on a mirrored install
// the default would name an image the nodes cannot pull.
func chooseAgentImage(ctx context.Context, client kubernetes.Interface, c config) (image, why string, err error) {
	if c.agentImageSet {
		return c.agentImage, "--agent-image (or AGENT_IMAGE) is set", nil
	}
	ns, name := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")
	if ns == "" || name == "" {
		return c.agentImage, "the built-in default: POD_NAMESPACE and POD_NAME are not set, so there is no own pod to read the image from", nil
	}
	img, err := operator.OwnImage(ctx, client, ns, name)
	if err != nil {
		return "", "", fmt.Errorf("the agent image is the operator's own (set --agent-image to name one instead): %w", err)
	}
	return img, fmt.Sprintf("the operator's own image, from its pod %s/%s (--agent-image not set)", ns, name), nil
}

// unservedGranted asks the API server (SelfSubjectAccessReviews, which every
// authenticated user may make) whether the operator may watch exporters in
// every namespace and update their status, as --report-unserved needs. When it
// may not, the report is off and the log says why: a watch it may not make
// would fail the operator's start after the cache sync timeout.
func unservedGranted(ctx context.Context, client kubernetes.Interface, log *logrus.Logger) bool {
	for _, a := range []authorizationv1.ResourceAttributes{
		{Verb: "list", Group: jmxv1alpha1.SchemeGroupVersion.Group, Resource: "prometheusjmxexporters"},
		{Verb: "watch", Group: jmxv1alpha1.SchemeGroupVersion.Group, Resource: "prometheusjmxexporters"},
		{Verb: "update", Group: jmxv1alpha1.SchemeGroupVersion.Group, Resource: "prometheusjmxexporters", Subresource: "status"},
	} {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &a}}, metav1.CreateOptions{})
		if err != nil || !r.Status.Allowed {
			reason := ""
			if err != nil {
				reason = err.Error()
			} else {
				reason = "denied " + r.Status.Reason
			}
			log.WithField("verb", a.Verb+" "+a.Resource+"/"+a.Subresource).Warnf("--report-unserved is on, but the operator may not watch exporters in every namespace "+
				"and write their status (%s): exporters in namespaces it does not serve are not told so. Grant the ClusterRole "+
				"prometheus-jmx-exporter-operator-unserved (deploy/operator/rbac-unserved.yaml), or set --report-unserved=false", reason)
			return false
		}
	}
	return true
}

// ensureMetricsService writes the metrics Service (and ServiceMonitor) that
// --metrics-service asks for. It runs on every replica at every start, before
// the election (docs/leader-election.md). A failure is logged, not fatal: the
// operator's work does not depend on being scraped.
func ensureMetricsService(ctx context.Context, cfg *rest.Config, c config, log *logrus.Logger) {
	if c.metricsService == metricsServiceNone || c.metricsAddr == "0" {
		return
	}
	_, portStr, err := net.SplitHostPort(c.metricsAddr)
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil {
		log.Warnf("no metrics Service: --metrics-addr %q has no port", c.metricsAddr)
		return
	}
	svc, err := metrics.EnsureService(ctx, cfg, metrics.ServiceOptions{
		ScrapeOnlyLeader:     c.metricsService == metricsServiceLeader,
		Port:                 int32(port),
		ServiceMonitorLabels: c.svcMonLabels,
		Logger:               log,
	})
	if err != nil {
		log.WithError(err).Warn("could not write the metrics Service (--metrics-service); the operator works on, unscraped through it")
		return
	}
	log.WithFields(logrus.Fields{"service": svc.Name, "mode": c.metricsService}).Info("metrics Service in place")
}

func nsLabel(ns string) string {
	if ns == "" {
		return "(all)"
	}
	return ns
}

// lateJVMInterval is Options.LateJVMInterval for the flag's value: its 0
// (off) is the Options' negative.
func lateJVMInterval(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
