// Command images builds every image the handlerkit test node and demo run,
// without a container engine, into docker-archive tarballs (`make images`):
// pause, the echo HTTP server, the jmx agent image, the JVM application image,
// the shell-less JVM image, and the memcached example operator's memcached
// and operator images. Load them into a cluster-mode testenv with
// testenv.WithImageArchives or Environment.LoadImageArchive, or into any
// containerd with `ctr -n k8s.io images import`.
//
// Usage: go run ./hack/images [-out dir] [-agent-jar file]
//
// Without -agent-jar the agent image carries the project's own java agent
// (agent/, docs/agent.md), built with Maven and cached by the SHA-256 of its
// inputs (jvmtest.AgentJar): the jar the production image ships. The agent
// image is also the operator's image: it holds jmx-attach, the operator and
// the jar.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run() error {
	cache, err := testimages.DefaultCacheDir()
	if err != nil {
		return err
	}
	out := flag.String("out", cache, "directory to write the image archives into")
	agentJar := flag.String("agent-jar", "", "java agent jar for the agent image (default: the project's agent from agent/, built with mvn)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "handlerkit-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	step := func(name string, build func() (testimages.Archive, error)) error {
		start := time.Now()
		a, err := build()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		info, err := os.Stat(a.File)
		if err != nil {
			return err
		}
		fmt.Printf("images: %-28s %-45s %6.1f MB %5.1fs\n", a.Ref, a.File, float64(info.Size())/1e6,
			time.Since(start).Seconds())
		return nil
	}
	if err := step("pause", func() (testimages.Archive, error) { return testimages.BuildPause(ctx, *out) }); err != nil {
		return err
	}
	if err := step("echo", func() (testimages.Archive, error) { return testimages.BuildEcho(ctx, *out) }); err != nil {
		return err
	}
	jar := *agentJar
	if jar == "" {
		if jar, err = jvmtest.AgentJar(ctx); err != nil {
			return err
		}
	}
	bins := presentBinaries(append(testimages.DefaultAgentBinaries(), testimages.OperatorBinary()))
	if len(bins) == 0 {
		return fmt.Errorf("no agent binary exists in this checkout (looked for cmd/jmx-attach)")
	}
	if err := step("agent", func() (testimages.Archive, error) { return testimages.BuildAgent(ctx, *out, jar, bins) }); err != nil {
		return err
	}
	app, err := jvmtest.BuildSampleApp(filepath.Join(work, "app"))
	if err != nil {
		return err
	}
	javaApp := testimages.JavaApp{Jar: app.Jar, MainClass: app.MainClass}
	if err := step("jvm app", func() (testimages.Archive, error) {
		return testimages.BuildJVMApp(ctx, *out, cache, javaApp)
	}); err != nil {
		return err
	}
	if err := step("shell-less jvm", func() (testimages.Archive, error) {
		return testimages.BuildShelllessJVM(ctx, *out, cache, javaApp)
	}); err != nil {
		return err
	}
	if err := step("memcached", func() (testimages.Archive, error) { return testimages.BuildMemcached(ctx, *out, cache) }); err != nil {
		return err
	}
	return step("memcached operator", func() (testimages.Archive, error) { return testimages.BuildMemcachedOperator(ctx, *out) })
}

// presentBinaries keeps the binaries whose main package exists in the
// checkout this command runs from (the module root).
func presentBinaries(bins []testimages.Binary) []testimages.Binary {
	var out []testimages.Binary
	for _, b := range bins {
		rel := strings.TrimPrefix(b.Package, "github.com/handlerkit/handlerkit/")
		if matches, _ := filepath.Glob(filepath.Join(rel, "*.go")); len(matches) > 0 {
			out = append(out, b)
		} else {
			fmt.Printf("images: %s does not exist yet; the agent image is built without it\n", b.Package)
		}
	}
	return out
}
