package testenv_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// shared serves the tests that only need a cluster, not one of their own.
var shared testenv.Shared

func sharedEnv(t *testing.T) *testenv.Environment { return shared.Get(t) }

func TestMain(m *testing.M) {
	if os.Getenv(childEnvVar) != "" {
		runChild()
		return
	}
	if os.Getenv(nodeChildEnvVar) != "" {
		runNodeChild()
		return
	}
	os.Exit(shared.Main(m))
}

var widgetGVR = schema.GroupVersionResource{Group: "example.handlerkit.dev", Version: "v1", Resource: "widgets"}

func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.handlerkit.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.handlerkit.dev",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "integer"}}},
					},
				}},
			}},
		},
	}
}

func TestStartedEnvironmentServesNamespacesCRDsAndWatches(t *testing.T) {
	env := sharedEnv(t)
	ctx := t.Context()

	ns, err := env.CreateNamespace(ctx, "watch")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Clientset().CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace %s not readable: %v", ns, err)
	}
	if err := env.InstallCRDs(ctx, widgetCRD()); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	w, err := dyn.Resource(widgetGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watching widgets: %v", err)
	}
	defer w.Stop()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.handlerkit.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "first"},
		"spec":     map[string]any{"size": int64(3)},
	}}
	if _, err := dyn.Resource(widgetGVR).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating widget: %v", err)
	}
	select {
	case ev := <-w.ResultChan():
		got, ok := ev.Object.(*unstructured.Unstructured)
		if ev.Type != watch.Added || !ok || got.GetName() != "first" {
			t.Fatalf("want ADDED first, got %s %#v", ev.Type, ev.Object)
		}
		if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 3 {
			t.Fatalf("spec.size = %d, want 3", size)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event for the created widget")
	}
}

func TestVersionIsTheReleaseNotMaster(t *testing.T) {
	v, err := sharedEnv(t).Clientset().Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != testenv.KubeVersion {
		t.Fatalf("/version reports %q, want %q", v.GitVersion, testenv.KubeVersion)
	}
}

// canListConfigMaps reports whether cfg may list configmaps in ns, failing
// the test on anything but a clean yes or Forbidden.
func canListConfigMaps(t *testing.T, cs kubernetes.Interface, ns string) bool {
	t.Helper()
	_, err := cs.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
	switch {
	case err == nil:
		return true
	case apierrors.IsForbidden(err):
		return false
	default:
		t.Fatalf("listing configmaps: %v", err)
		return false
	}
}

func grantConfigMapRead(t *testing.T, env *testenv.Environment, ns string, subject rbacv1.Subject) {
	t.Helper()
	ctx := t.Context()
	admin := env.Clientset()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "read-configmaps-" + strings.ToLower(subject.Kind), Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"}}},
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{subject},
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitAllowed polls because the RBAC authorizer learns of new bindings
// through its informers, a moment after the create returns.
func waitAllowed(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return canListConfigMaps(t, cs, ns), nil
	})
	if err != nil {
		t.Fatalf("still forbidden after the Role was granted: %v", err)
	}
}

func TestServiceAccountIsDeniedUntilARoleGrantsAccess(t *testing.T) {
	env := sharedEnv(t)
	ns, err := env.CreateNamespace(t.Context(), "rbac-sa")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.ConfigForServiceAccount(t.Context(), ns, "restricted")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.TLSClientConfig.CertData) != 0 || cfg.BearerToken == "" {
		t.Fatal("ServiceAccount config must carry only the token, not the admin certificate")
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	if canListConfigMaps(t, cs, ns) {
		t.Fatal("a ServiceAccount with no Role may list configmaps")
	}
	grantConfigMapRead(t, env, ns, rbacv1.Subject{Kind: "ServiceAccount", Name: "restricted", Namespace: ns})
	waitAllowed(t, cs, ns)
}

func TestUserIsDeniedUntilARoleGrantsAccess(t *testing.T) {
	env := sharedEnv(t)
	ns, err := env.CreateNamespace(t.Context(), "rbac-user")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.ConfigForUser("alice", "developers")
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	if canListConfigMaps(t, cs, ns) {
		t.Fatal("alice may list configmaps before any Role")
	}
	grantConfigMapRead(t, env, ns, rbacv1.Subject{Kind: "Group", Name: "developers", APIGroup: "rbac.authorization.k8s.io"})
	waitAllowed(t, cs, ns)
}

func TestInstallCRDsFromDirSkipsOtherKinds(t *testing.T) {
	env := sharedEnv(t)
	dir := t.TempDir()
	manifest := `# a CRD and an example resource in one file
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.handlerkit.dev
spec:
  group: example.handlerkit.dev
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: example.handlerkit.dev/v1
kind: Gadget
metadata: {name: example}
`
	if err := os.WriteFile(filepath.Join(dir, "gadgets.yaml"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("not a manifest"), 0o600); err != nil {
		t.Fatal(err)
	}
	crds, err := env.InstallCRDsFromDir(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != 1 || crds[0].Name != "gadgets.example.handlerkit.dev" {
		t.Fatalf("installed %d CRDs, want exactly gadgets", len(crds))
	}
	dyn := dynamic.NewForConfigOrDie(env.Config())
	gvr := schema.GroupVersionResource{Group: "example.handlerkit.dev", Version: "v1", Resource: "gadgets"}
	if _, err := dyn.Resource(gvr).Namespace("default").List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatalf("gadgets not served after InstallCRDsFromDir returned: %v", err)
	}
	if _, err := env.InstallCRDsFromDir(t.Context(), t.TempDir()); err == nil {
		t.Fatal("an empty directory must be an error, not a silent no-op")
	}
}

func TestStartFailureShowsTheLogTail(t *testing.T) {
	_, err := testenv.Start(t.Context(), testenv.WithAPIServerArgs("--no-such-flag=1"))
	if err == nil {
		t.Fatal("an apiserver with an unknown flag started")
	}
	msg := err.Error()
	if !strings.Contains(msg, "kube-apiserver") || !strings.Contains(msg, "no-such-flag") {
		t.Fatalf("the error does not explain the failure with the apiserver log:\n%s", msg)
	}
}

func TestExistingClusterFromKubeconfig(t *testing.T) {
	env := sharedEnv(t)
	cfg := env.Config()
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kubeconfig.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kubeconfig.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "admin"}
	kubeconfig.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kubeconfig, path); err != nil {
		t.Fatal(err)
	}
	t.Setenv(testenv.EnvKubeconfig, path)

	existing, err := testenv.Start(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(existing.Processes()) != 0 || existing.Dir() != "" {
		t.Fatal("with a kubeconfig, Start must not start a control plane")
	}
	ns, err := existing.CreateNamespace(t.Context(), "existing")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := existing.KubeconfigFile(); err != nil || got != path {
		t.Errorf("KubeconfigFile of an existing cluster: %q, %v; want the given %q", got, err, path)
	}
	written := filepath.Join(t.TempDir(), "written")
	if err := existing.WriteKubeconfig(written); err != nil {
		t.Fatal(err)
	}
	writtenCfg, err := clientcmd.BuildConfigFromFlags("", written)
	if err != nil {
		t.Fatal(err)
	}
	listsNamespace(t, writtenCfg, ns)
	// Users are impersonated on an existing cluster, and RBAC still applies.
	userCfg, err := existing.ConfigForUser("bob")
	if err != nil {
		t.Fatal(err)
	}
	if canListConfigMaps(t, kubernetes.NewForConfigOrDie(userCfg), ns) {
		t.Fatal("impersonated bob may list configmaps without a Role")
	}
	if err := existing.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Clientset().CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{}); err != nil {
		t.Fatalf("Stop on an existing cluster must leave it running: %v", err)
	}
}

const childEnvVar = "HANDLERKIT_TESTENV_CHILD"

// runChild is the body of the re-executed test binary: it starts an
// Environment, reports what it started, and waits to be killed.
func runChild() {
	env, err := testenv.Start(context.Background())
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	for _, p := range env.Processes() {
		fmt.Println("pid", p.Pid())
	}
	fmt.Println("dir", env.Dir())
	fmt.Println("ready")
	select {}
}

// startChild re-executes the test binary with envVar set, so that TestMain
// runs the child's part; the child reports on its stdout. The child is killed
// when the test ends, if the test has not killed it already.
func startChild(t *testing.T, envVar string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envVar+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}

// TestProcessesDieWithTheTestBinaryTwoRunAtOnceAndStopCleansUp proves, with
// three control planes where three tests used to start five (each start and
// stop is seconds on the node lane, which runs pkg/testenv):
//
//   - the processes of a test binary killed with SIGKILL die with it, and its
//     directory is left until the next Start removes it (formerly
//     TestProcessesDieWithTheTestBinary, which started one more environment
//     as that next Start; here the two environments below are it);
//   - two environments started at once listen on their own ports and keep
//     their own storage (formerly TestTwoEnvironmentsRunAtOnce);
//   - Stop ends and reaps etcd and kube-apiserver and removes the directory,
//     and a second Stop is a no-op (formerly TestStopLeavesNoProcessOrDirectory,
//     which started an environment of its own for it).
func TestProcessesDieWithTheTestBinaryTwoRunAtOnceAndStopCleansUp(t *testing.T) {
	cmd, scanner := startChild(t, childEnvVar)
	var pids []int
	var dir string
	for scanner.Scan() {
		field, value, _ := strings.Cut(scanner.Text(), " ")
		switch field {
		case "pid":
			pid, _ := strconv.Atoi(value)
			pids = append(pids, pid)
		case "dir":
			dir = value
		case "error":
			t.Fatalf("child could not start an environment: %s", value)
		}
		if field == "ready" {
			break
		}
	}
	if len(pids) != 2 || dir == "" {
		t.Fatalf("child reported pids %v and dir %q", pids, dir)
	}
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("pid %d not running while the child lives", pid)
		}
	}

	// SIGKILL: the child gets no chance to run Stop or any cleanup.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return !alive(pids[0]) && !alive(pids[1]), nil
	})
	if err != nil {
		t.Fatalf("control-plane processes %v outlived the killed test binary", pids)
	}
	// The dead binary's directory is removed by the next Start.
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("expected the killed child's dir to remain until the next Start: %v", err)
	}

	// Two at once; each of them is a next Start for the killed child.
	var envs [2]*testenv.Environment
	var errs [2]error
	var wg sync.WaitGroup
	for i := range envs {
		wg.Go(func() { envs[i], errs[i] = testenv.Start(t.Context()) })
	}
	wg.Wait()
	for i := range envs {
		if envs[i] != nil {
			t.Cleanup(func() { _ = envs[i].Stop() })
		}
		if errs[i] != nil {
			t.Fatalf("environment %d: %v", i, errs[i])
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale dir %s of a killed test binary was not removed by Start", dir)
	}
	if envs[0].Config().Host == envs[1].Config().Host {
		t.Fatalf("both environments listen on %s", envs[0].Config().Host)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "only-in-first"}}
	if _, err := envs[0].Clientset().CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = envs[1].Clientset().CoreV1().Namespaces().Get(t.Context(), "only-in-first", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the second environment sees the first one's namespace (err=%v): they share storage", err)
	}

	// Stop: no process, no directory; twice is fine.
	env := envs[0]
	procs := env.Processes()
	if len(procs) != 2 {
		t.Fatalf("want etcd and kube-apiserver, got %d processes", len(procs))
	}
	envDir := env.Dir()
	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if alive(p.Pid()) {
			t.Errorf("%s (pid %d) still running after Stop", p.Name, p.Pid())
		}
		if exited, _ := p.Exited(); !exited {
			t.Errorf("%s not reaped after Stop", p.Name)
		}
	}
	if _, err := os.Stat(envDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp dir %s still exists after Stop (stat: %v)", envDir, err)
	}
	if err := env.Stop(); err != nil {
		t.Errorf("a second Stop must be a no-op, got %v", err)
	}
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
	// The state follows the parenthesised command name: "pid (comm) S ...".
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func BenchmarkStart(b *testing.B) {
	for b.Loop() {
		env, err := testenv.Start(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := env.Stop(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// TestStartWithADirWithoutCRDsFailsBeforeStarting: WithCRDsFromDir names a
// directory without CRDs (or none at all): Start says so and starts nothing.
// That the CRDs of a good directory are served, and followed by the garbage
// collector, is clustertest's TestGarbageCollectorDeletesOwnedObjects.
func TestStartWithADirWithoutCRDsFailsBeforeStarting(t *testing.T) {
	empty := t.TempDir()
	for dir, want := range map[string]string{
		empty:                             "no CustomResourceDefinition in " + empty,
		filepath.Join(empty, "not-there"): "reading CRD dir",
	} {
		env, err := testenv.Start(t.Context(), testenv.WithCRDsFromDir(dir))
		if err == nil {
			env.Stop()
			t.Fatalf("Start with %s succeeded", dir)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start with %s: %v, want %q", dir, err, want)
		}
	}
}
