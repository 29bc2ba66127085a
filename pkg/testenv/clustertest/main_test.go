package clustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// env is the one cluster-mode environment every test of this package uses;
// each test works in a namespace of its own, and they run in parallel
// (t.Parallel): most of their time is waiting for pods to start.
var env *testenv.Environment

// widgetCRD is a namespaced custom resource, Widget, installed at Start.
const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.clustertest.handlerkit.dev
spec:
  group: clustertest.handlerkit.dev
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// agentDir holds the test agent jar and its config, mounted into JVM pods.
var agentDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	work, err := os.MkdirTemp("", "handlerkit-clustertest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(work)
	// The images build while the cluster starts (the start mostly waits for
	// its components). On a machine that cannot run a node, Start fails at
	// once, in its preflight, and that error (and the skip it allows
	// without CI) wins: the build is cancelled and its result ignored.
	buildCtx, cancelBuild := context.WithCancel(ctx)
	defer cancelBuild()
	type built struct {
		archives []string
		err      error
		took     time.Duration
	}
	builds := make(chan built, 1)
	go func() {
		start := time.Now()
		archives, err := buildImages(buildCtx, work)
		builds <- built{archives, err, time.Since(start)}
	}()
	// A CRD installed at Start, before the controller-manager: the garbage
	// collector follows owner references to its resources at once
	// (TestGarbageCollectorDeletesOwnedObjects).
	crdDir := filepath.Join(work, "crds")
	if err := os.MkdirAll(crdDir, 0o700); err == nil {
		err = os.WriteFile(filepath.Join(crdDir, "widgets.yaml"), []byte(widgetCRD), 0o600)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	start := time.Now()
	env, err = testenv.Start(ctx, testenv.WithNode(), testenv.WithCRDsFromDir(crdDir))
	if err != nil {
		cancelBuild()
		<-builds
		return startFailure(err)
	}
	defer func() {
		if env != nil {
			env.Stop()
		}
	}()
	fmt.Fprintf(os.Stderr, "clustertest: cluster started in %s\n", time.Since(start).Round(time.Millisecond))
	b := <-builds
	if b.err != nil {
		fmt.Fprintf(os.Stderr, "clustertest: building images: %v\n", b.err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "clustertest: images built in %s (beside the cluster's start)\n", b.took.Round(time.Millisecond))
	start = time.Now()
	// containerd imports the archives side by side.
	errs := make([]error, len(b.archives))
	var wg sync.WaitGroup
	for i, a := range b.archives {
		wg.Go(func() { errs[i] = env.LoadImageArchive(ctx, a) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "clustertest: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "clustertest: images imported in %s\n", time.Since(start).Round(time.Millisecond))
	code := m.Run()
	err = env.Stop()
	env = nil
	if err != nil {
		fmt.Fprintf(os.Stderr, "clustertest: stop: %v\n", err)
		code = 1
	}
	return code
}

// startFailure skips the package when the machine cannot run a node and CI
// is unset; under CI=true, and for every other error, the package fails.
func startFailure(err error) int {
	if errors.Is(err, testenv.ErrNodeUnsupported) && os.Getenv("CI") == "" {
		fmt.Fprintf(os.Stderr, "clustertest: skipping (CI unset): %v\n", err)
		return 0
	}
	fmt.Fprintf(os.Stderr, "clustertest: %v\n", err)
	return 1
}

// buildImages builds the echo image and both JVM images (or finds the JVM
// images already built from the same inputs) and the test agent that JVM
// pods load at start.
func buildImages(ctx context.Context, work string) ([]string, error) {
	cache, err := testimages.DefaultCacheDir()
	if err != nil {
		return nil, err
	}
	// The image cache, where `make images` leaves the JVM images: their
	// archives are named after their inputs and reused when they match,
	// which spares this race-instrumented binary hashing 500 MB.
	out := cache
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	echo, err := testimages.BuildEcho(ctx, out)
	if err != nil {
		return nil, err
	}
	app, err := jvmtest.BuildSampleApp(filepath.Join(work, "app"))
	if err != nil {
		return nil, err
	}
	javaApp := testimages.JavaApp{Jar: app.Jar, MainClass: app.MainClass}
	jvm, err := testimages.BuildJVMApp(ctx, out, cache, javaApp)
	if err != nil {
		return nil, err
	}
	slim, err := testimages.BuildShelllessJVM(ctx, out, cache, javaApp)
	if err != nil {
		return nil, err
	}
	agentDir = filepath.Join(work, "agent")
	if err := os.MkdirAll(agentDir, 0o755); err != nil {
		return nil, err
	}
	jar, err := jvmtest.BuildTestAgent(filepath.Join(work, "agent-build"))
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(jar)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(agentDir, "agent.jar"), data, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(agentDir, "config.yaml"), []byte("rules: []\n"), 0o644); err != nil {
		return nil, err
	}
	return []string{echo.File, jvm.File, slim.File}, nil
}
