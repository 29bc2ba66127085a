package testenv

import (
	"context"
	"errors"
	"fmt"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// EnvKubeconfig names the environment variable that points tests at an
// existing cluster instead of starting a control plane.
const EnvKubeconfig = "HANDLERKIT_TEST_KUBECONFIG"

// dirPrefix starts the name of every temporary directory an Environment makes.
const dirPrefix = "handlerkit-testenv-"

// Environment is a running control plane (or an existing cluster) that tests
// talk to. Its methods are safe for concurrent use.
type Environment struct {
	config   *rest.Config
	dir      string // "" for an existing cluster
	ca       *authority
	procs    []*Process
	ports    []int
	existing bool
	node     *node // nil unless started WithNode
	apiPort  int

	clientset kubernetes.Interface

	kubeconfigMu   sync.Mutex
	kubeconfigPath string // written by KubeconfigFile; the given file for an existing cluster

	stopOnce sync.Once
	stopErr  error
}

// Option configures Start.
type Option func(*options)

type options struct {
	apiserverArgs []string
	startTimeout  time.Duration
	node          nodeOptions
	crdDirs       []string
	crds          []*apiextensionsv1.CustomResourceDefinition // read from crdDirs by Start
}

// WithCRDsFromDir installs the CustomResourceDefinitions in dir, as
// InstallCRDsFromDir does, as soon as the apiserver is ready: in cluster mode
// before kube-controller-manager starts, so that its garbage collector
// follows owner references to and from the custom resources from its first
// second. A CRD installed after Start is seen by the garbage collector only
// at its next discovery, up to 30 seconds later. Start fails, before it
// starts anything, when dir holds no CRD. With an existing cluster
// (EnvKubeconfig) the CRDs are installed there.
func WithCRDsFromDir(dir string) Option {
	return func(o *options) { o.crdDirs = append(o.crdDirs, dir) }
}

// WithAPIServerArgs adds flags to kube-apiserver's command line, after the
// defaults, so a later flag overrides an earlier one.
func WithAPIServerArgs(args ...string) Option {
	return func(o *options) { o.apiserverArgs = append(o.apiserverArgs, args...) }
}

// WithStartTimeout bounds how long Start waits for the control plane to be
// ready. The default is 60 seconds (a warm start takes about 3).
func WithStartTimeout(d time.Duration) Option {
	return func(o *options) { o.startTimeout = d }
}

// New starts an Environment for a test, stops it in t.Cleanup, and fails the
// test when it cannot start (or skips it, when CI is unset and the machine
// cannot run a cluster-mode node; see SkipOrFail).
func New(t testing.TB, opts ...Option) *Environment {
	t.Helper()
	env, err := Start(context.Background(), opts...)
	if err != nil {
		SkipOrFail(t, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("testenv: stop: %v", err)
		}
	})
	return env
}

// Start starts etcd and kube-apiserver on free loopback ports and returns
// once the apiserver reports ready. With HANDLERKIT_TEST_KUBECONFIG set it
// connects to that cluster instead and starts nothing.
func Start(ctx context.Context, opts ...Option) (*Environment, error) {
	o := options{startTimeout: defaultStartTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	// A directory without CRDs fails before anything starts.
	for _, d := range o.crdDirs {
		crds, err := ReadCRDs(d)
		if err == nil && len(crds) == 0 {
			err = fmt.Errorf("testenv: no CustomResourceDefinition in %s", d)
		}
		if err != nil {
			return nil, err
		}
		o.crds = append(o.crds, crds...)
	}
	if path := os.Getenv(EnvKubeconfig); path != "" {
		env, err := startExisting(path)
		if err == nil && len(o.crds) > 0 {
			err = env.InstallCRDs(ctx, o.crds...)
		}
		if err != nil {
			return nil, err
		}
		return env, nil
	}
	if o.node.enabled && o.startTimeout == defaultStartTimeout {
		// Importing large image archives and the first pods take longer.
		o.startTimeout = defaultNodeStartTimeout
	}
	removeStaleDirs(false)
	// Before the start timeout begins: the first build takes minutes.
	if err := EnsureBinaries(ctx, ControlPlaneBinaries()...); err != nil {
		return nil, err
	}
	if o.node.enabled {
		if err := prepareNode(ctx, o); err != nil {
			return nil, err
		}
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var env *Environment
		env, err = startLocal(ctx, o)
		if err == nil {
			return env, nil
		}
		// Another program may take a port between our probe and the bind.
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, err
}

func startLocal(parent context.Context, o options) (_ *Environment, err error) {
	ctx, cancel := context.WithTimeout(parent, o.startTimeout)
	defer cancel()

	apiserverBin, err := Binary(ctx, "kube-apiserver")
	if err != nil {
		return nil, err
	}
	etcdBin, err := Binary(ctx, "etcd")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("testenv: creating temp dir: %w", err)
	}
	env := &Environment{dir: dir}
	defer func() {
		if err != nil {
			_ = env.Stop()
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	for _, sub := range []string{"etcd", "certs", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("testenv: %w", err)
		}
	}
	for range 3 {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		env.ports = append(env.ports, p)
	}
	etcdClient, etcdPeer, apiPort := env.ports[0], env.ports[1], env.ports[2]
	env.apiPort = apiPort
	// The apiserver listens on loopback, or with the service proxy on the
	// node's bridge, which must exist first.
	apiIP := "127.0.0.1"
	servingIPs := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	if o.node.enabled {
		// A cluster-mode environment waits for the machine-wide cluster lock
		// as long as parent allows (another test binary's cluster may hold it
		// for minutes); the start timeout begins once it holds the lock.
		if o.node.serviceProxy {
			if err := prepareServiceProxy(parent, env); err != nil {
				return nil, err
			}
		} else {
			env.node = &node{dir: filepath.Join(env.dir, "node"), containers: map[string]bool{}}
			if err := env.node.claimNetwork(parent, os.Stderr); err != nil {
				return nil, err
			}
		}
		var cancelAfterLock context.CancelFunc
		ctx, cancelAfterLock = context.WithTimeout(parent, o.startTimeout)
		defer cancelAfterLock()
	}
	if o.node.serviceProxy {
		apiIP = env.node.gatewayIP()
		servingIPs = append(servingIPs, net.ParseIP(apiIP), net.ParseIP(KubernetesServiceIP))
	}

	if env.ca, err = newAuthority(); err != nil {
		return nil, err
	}
	certs := filepath.Join(dir, "certs")
	serving, err := env.ca.serving([]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local"}, servingIPs)
	if err != nil {
		return nil, err
	}
	servingCert, servingKey, err := serving.write(certs, "apiserver")
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	caPath := filepath.Join(certs, "ca.crt")
	if err := os.WriteFile(caPath, env.ca.certPEM, 0o600); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	saKey, err := newSigningKey()
	if err != nil {
		return nil, err
	}
	saKeyPath := filepath.Join(certs, "service-account.key")
	if err := os.WriteFile(saKeyPath, saKey, 0o600); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	admin, err := env.ca.client("handlerkit-admin", []string{"system:masters"})
	if err != nil {
		return nil, err
	}

	logs := filepath.Join(dir, "logs")
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	etcd, err := startProcess("etcd", etcdBin, logs, []string{
		"--name=testenv",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=testenv=" + peerURL,
		// A test cluster's data is thrown away; fsync only costs time.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}, nil)
	if err != nil {
		return nil, err
	}
	env.procs = append(env.procs, etcd)

	args := append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + apiIP,
		"--advertise-address=" + apiIP,
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + certs,
		"--tls-cert-file=" + servingCert,
		"--tls-private-key-file=" + servingKey,
		"--client-ca-file=" + caPath,
		authorizationMode(o),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saKeyPath,
		"--service-account-signing-key-file=" + saKeyPath,
		"--service-cluster-ip-range=" + serviceCIDR,
		disabledAdmission(o),
		endpointReconciler(o),
		"--allow-privileged=true",
		"--profiling=false",
	}, append(nodeAPIServerArgs(o), o.apiserverArgs...)...)
	apiserver, err := startProcess("kube-apiserver", apiserverBin, logs, args, nil)
	if err != nil {
		return nil, err
	}
	env.procs = append(env.procs, apiserver)
	// The apiserver starts beside etcd, which takes most of a second to
	// elect itself leader, while the apiserver spends about as long loading
	// before it first dials etcd (it retries until etcd answers).
	if err := etcd.waitFor(ctx, "healthy", func(ctx context.Context) error { return etcdHealthy(ctx, etcdURL) }); err != nil {
		return nil, err
	}

	env.config = &rest.Config{
		Host: "https://" + net.JoinHostPort(apiIP, strconv.Itoa(apiPort)),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   env.ca.certPEM,
			CertData: admin.certPEM,
			KeyData:  admin.keyPEM,
		},
		// Tests create objects in bulk; client-side throttling would only
		// measure the limiter.
		QPS:   1000,
		Burst: 2000,
	}
	if env.clientset, err = kubernetes.NewForConfig(env.Config()); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	err = apiserver.waitFor(ctx, "ready", func(ctx context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		body, err := env.clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		if err != nil {
			return err
		}
		if string(body) != "ok" {
			return fmt.Errorf("readyz: %s", body)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(o.crds) > 0 {
		if err := env.InstallCRDs(ctx, o.crds...); err != nil {
			return nil, err
		}
	}
	if o.node.enabled {
		if err := startNode(ctx, env, o); err != nil {
			return nil, err
		}
	}
	return env, nil
}

func etcdHealthy(ctx context.Context, url string) error {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd /health: %s", resp.Status)
	}
	return nil
}

// Config returns a rest.Config for an admin identity (group system:masters).
// Each call returns a fresh copy that the caller may change.
func (e *Environment) Config() *rest.Config {
	return rest.CopyConfig(e.config)
}

// Clientset returns a clientset for the admin identity.
func (e *Environment) Clientset() kubernetes.Interface { return e.clientset }

// Dir is the Environment's temporary directory ("" for an existing cluster).
// It holds the etcd data, the certificates and the logs.
func (e *Environment) Dir() string { return e.dir }

// Processes lists the processes the Environment started (none for an
// existing cluster), for tests that check what is running.
func (e *Environment) Processes() []*Process {
	return append(append([]*Process(nil), e.procs...), e.nodeProcesses()...)
}

// Stop ends every process the Environment started and removes its
// directory. It is safe to call more than once.
func (e *Environment) Stop() error {
	e.stopOnce.Do(func() {
		var nodeErr error
		if e.node != nil {
			nodeErr = e.node.stop(e)
		}
		// The apiserver first: it would otherwise log etcd errors as it goes.
		// It gets SIGKILL at once: its graceful shutdown spends a second
		// (v1.36.3: stopping the ServiceCIDR allocator) on state that is
		// thrown away with etcd's data; etcd still gets SIGTERM.
		for i := len(e.procs) - 1; i >= 0; i-- {
			grace := 10 * time.Second
			if e.procs[i].Name == "kube-apiserver" {
				grace = 0
			}
			e.procs[i].stop(grace)
		}
		releasePorts(e.ports...)
		if e.dir != "" {
			if err := os.RemoveAll(e.dir); err != nil {
				e.stopErr = fmt.Errorf("testenv: removing %s: %w", e.dir, err)
			}
		}
		e.stopErr = errors.Join(nodeErr, e.stopErr)
	})
	return e.stopErr
}

// removeStaleDirs deletes directories left by test binaries that were killed
// before they could call Stop. Their processes died with them (Pdeathsig).
// A directory with a node is cleaned only under the cluster lock
// (haveClusterLock, or taken here when free): the moment a killed node's
// lock is gone, the next cluster-mode environment may take its bridge name,
// and a cleanup running beside it would delete that environment's bridge.
// While another environment holds the lock, node directories are left to it
// (claimNetwork cleans them) or to the next cluster-mode Start.
func removeStaleDirs(haveClusterLock bool) {
	locked, tried := haveClusterLock, haveClusterLock
	defer func() {
		if locked && !haveClusterLock {
			releaseClusterLock()
		}
	}()
	// nodeCleanable takes the cluster lock, once, for the first node
	// directory, and says whether node directories may be cleaned.
	nodeCleanable := func() bool {
		if !tried {
			tried = true
			locked = tryClusterLock()
		}
		return locked
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			// A node directory without its owner file is what an earlier
			// removal left when mounts kept it from finishing.
			if errors.Is(err, os.ErrNotExist) && isNodeDir(dir) && nodeCleanable() {
				cleanStaleNode(dir)
				_ = os.RemoveAll(dir)
			}
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue
		}
		if isNodeDir(dir) {
			if !nodeCleanable() {
				continue
			}
			cleanStaleNode(dir)
		}
		_ = os.RemoveAll(dir)
	}
}
