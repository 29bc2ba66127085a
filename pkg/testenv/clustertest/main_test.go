package clustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// env is the one cluster-mode environment every test of this package uses;
// each test works in a namespace of its own.
var env *testenv.Environment

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
	// Start first: on a machine that cannot run a node, that error (and
	// the skip it allows without CI) comes before any image build.
	start := time.Now()
	env, err = testenv.Start(ctx, testenv.WithNode())
	if err != nil {
		return startFailure(err)
	}
	defer func() {
		if env != nil {
			env.Stop()
		}
	}()
	fmt.Fprintf(os.Stderr, "clustertest: cluster started in %s\n", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	archives, err := buildImages(ctx, work)
	if err != nil {
		fmt.Fprintf(os.Stderr, "clustertest: building images: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "clustertest: images built in %s\n", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	for _, a := range archives {
		if err := env.LoadImageArchive(ctx, a); err != nil {
			fmt.Fprintf(os.Stderr, "clustertest: %v\n", err)
			return 1
		}
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
