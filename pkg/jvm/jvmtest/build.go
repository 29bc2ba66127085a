// Package jvmtest builds and runs real JVMs for tests, in the spirit of net/http/httptest.
//
// AgentJar builds the project's own JMX exporter agent (agent/ at the module root, docs/agent.md) with Maven and
// caches it by the SHA-256 of its inputs: the jar tests, the demo and the production image all load.
// JMXExporterJar fetches the upstream jmx_exporter agent 1.0.1 for the tests that need the real upstream agent.
//
// It also ships two small Java programs as embedded source and compiles them with javac at run time:
//
//   - a test java agent (BuildTestAgent) that stands in for the Prometheus jmx_exporter agent: it takes the same
//     agent argument, [host:]<port>:<config.yaml>, calls System.exit when it cannot start, and serves /metrics
//     with values read from real MBeans;
//   - a sample application (BuildSampleApp) that registers MBeans whose values change over time and runs until
//     it is killed.
//
// StartJVM runs the sample application as a child process and kills it when the test ends, with LightFlags (the
// client compiler and the serial collector: about half the CPU of the JDK's defaults over a test's seconds)
// unless Options.DefaultCompilers is set.
package jvmtest

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

//go:embed testdata/agent testdata/sampleapp
var sources embed.FS

const (
	// TestAgentClass is the Agent-Class (and Premain-Class) of the test agent jar (BuildTestAgent).
	TestAgentClass = "dev.handlerkit.testagent.Agent"
	// SampleMainClass is the main class of the sample application.
	SampleMainClass = "dev.handlerkit.sample.SampleApp"
	// SampleReadyLine is what the sample application prints on stdout once its MBeans are registered.
	SampleReadyLine = "handlerkit sample app ready"
	// AgentJarName is the file name BuildTestAgent gives the agent jar.
	AgentJarName = "handlerkit-test-agent.jar"
	// SampleJarName is the file name BuildSampleApp gives the application jar.
	SampleJarName = "handlerkit-sample-app.jar"
	// HeapMetric is the metric name under which the test agent reports java.lang:type=Memory HeapMemoryUsage.used.
	HeapMetric = "jvm_memory_bytes_used"
	// AgentFailArg is the agent argument that makes the test agent's agentmain throw, so that the target JVM
	// reports a failed agent start without exiting.
	AgentFailArg = "throw"
)

// javacTimeout bounds one javac run; javac on two shared cores takes a few seconds.
const javacTimeout = 2 * time.Minute

// App is a compiled sample application.
type App struct {
	// Jar is the absolute path of the runnable jar (its manifest names MainClass).
	Jar string
	// ClassesDir is the absolute path of the directory holding the compiled classes.
	ClassesDir string
	// MainClass is the fully qualified main class.
	MainClass string
}

// BuildTestAgent compiles the test agent into dir with the javac found on PATH and returns the absolute path of
// the agent jar. The jar's manifest carries Agent-Class and Premain-Class; it targets Java 8 so that it loads
// into any JVM from 8 on.
func BuildTestAgent(dir string) (string, error) {
	classes, err := compile(dir, "testdata/agent", "agent-classes")
	if err != nil {
		return "", fmt.Errorf("build test agent: %w", err)
	}
	jar := filepath.Join(dir, AgentJarName)
	attrs := map[string]string{"Agent-Class": TestAgentClass, "Premain-Class": TestAgentClass}
	if err := WriteJar(jar, classes, attrs); err != nil {
		return "", fmt.Errorf("build test agent: %w", err)
	}
	return jar, nil
}

// BuildSampleApp compiles the sample application into dir with the javac found on PATH and returns where it is.
// Another package can copy App.Jar (or App.ClassesDir) into an image and run it with
// `java -jar` or `java -cp <jar> <MainClass>`.
func BuildSampleApp(dir string) (App, error) {
	classes, err := compile(dir, "testdata/sampleapp", "sample-classes")
	if err != nil {
		return App{}, fmt.Errorf("build sample app: %w", err)
	}
	jar := filepath.Join(dir, SampleJarName)
	if err := WriteJar(jar, classes, map[string]string{"Main-Class": SampleMainClass}); err != nil {
		return App{}, fmt.Errorf("build sample app: %w", err)
	}
	return App{Jar: jar, ClassesDir: classes, MainClass: SampleMainClass}, nil
}

// javacArgs are the options compile gives javac: --release 8 keeps the classes loadable by every JVM the
// exporter supports; -Xlint:-options silences the "release 8 is deprecated" note newer compilers print.
var javacArgs = []string{"--release", "8", "-Xlint:-options", "-encoding", "UTF-8"}

// compile writes the embedded sources under srcRoot into dir and compiles them into dir/<out>.
//
// The classes are kept in javacCacheDir under a key of the sources, the javac found on PATH (its resolved path,
// size and modification time) and javacArgs, and copied from there when the key was compiled before: javac takes
// about a CPU second, and every test binary that starts a JVM builds these two programs. A cache that cannot be
// read or written is passed over: compile then runs javac as if there were none.
func compile(dir, srcRoot, out string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	srcDir := filepath.Join(dir, out+"-src")
	classes := filepath.Join(dir, out)
	for _, d := range []string{srcDir, classes} {
		if err := os.RemoveAll(d); err != nil {
			return "", err
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	var files []string
	key := sha256.New()
	err = fs.WalkDir(sources, srcRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := sources.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(key, "%s %d\n", path, len(data))
		key.Write(data)
		target := filepath.Join(srcDir, strings.TrimPrefix(path, srcRoot+"/"))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		files = append(files, target)
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		return "", err
	}
	cached := ""
	if id, err := javacIdentity(); err == nil {
		if cacheRoot, err := javacCacheDir(); err == nil {
			fmt.Fprintf(key, "javac %s\nargs %q\n", id, javacArgs)
			cached = filepath.Join(cacheRoot, fmt.Sprintf("%x", key.Sum(nil)))
			if copyTree(cached, classes) == nil {
				return classes, nil
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), javacTimeout)
	defer cancel()
	args := append(append(append([]string{}, javacArgs...), "-d", classes), files...)
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "javac", args...)
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("javac: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if cached != "" {
		keepClasses(classes, cached)
	}
	return classes, nil
}

// javacCacheDir is where compile keeps compiled classes: ${XDG_CACHE_HOME:-$HOME/.cache}/handlerkit/javac.
func javacCacheDir() (string, error) {
	agentDir, err := JMXExporterCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(agentDir), "javac"), nil
}

// javacIdentity names the javac on PATH for compile's cache key: its resolved path, size and modification time
// (another JDK, or the same path upgraded, is another key).
func javacIdentity() (string, error) {
	path, err := exec.LookPath("javac")
	if err != nil {
		return "", err
	}
	if path, err = filepath.EvalSymlinks(path); err != nil {
		return "", err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %d %d", path, fi.Size(), fi.ModTime().UnixNano()), nil
}

// keepClasses copies the classes javac wrote into cached: into a temporary directory beside it, renamed into
// place, so that another process never reads a half-written entry. Failing that (another process was first,
// or the cache is not writable), it keeps nothing.
func keepClasses(classes, cached string) {
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		return
	}
	tmp, err := os.MkdirTemp(filepath.Dir(cached), ".tmp-")
	if err != nil {
		return
	}
	defer os.RemoveAll(tmp)
	if copyTree(classes, tmp) == nil {
		_ = os.Rename(tmp, cached)
	}
}

// copyTree copies the regular files under src into dst, which it creates; src must exist.
func copyTree(src, dst string) error {
	if _, err := os.Stat(src); err != nil {
		return err
	}
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		return copyFile(path, target)
	})
}

// WriteJar writes a jar at jarPath holding every file under classesDir and a manifest with attrs (besides
// Manifest-Version, which it always writes first). Tests use it to build deliberately broken agent jars, for
// example one without Agent-Class.
func WriteJar(jarPath, classesDir string, attrs map[string]string) error {
	tmp := jarPath + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("write jar: %w", err)
	}
	defer os.Remove(tmp)
	zw := zip.NewWriter(f)
	if err := writeManifest(zw, attrs); err != nil {
		f.Close()
		return fmt.Errorf("write jar: %w", err)
	}
	if classesDir != "" {
		err = filepath.WalkDir(classesDir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, err := filepath.Rel(classesDir, path)
			if err != nil {
				return err
			}
			w, err := zw.Create(filepath.ToSlash(rel))
			if err != nil {
				return err
			}
			src, err := os.Open(path)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(w, src)
			return err
		})
		if err != nil {
			zw.Close()
			f.Close()
			return fmt.Errorf("write jar: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return fmt.Errorf("write jar: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write jar: %w", err)
	}
	if err := os.Rename(tmp, jarPath); err != nil {
		return fmt.Errorf("write jar: %w", err)
	}
	return nil
}

func writeManifest(zw *zip.Writer, attrs map[string]string) error {
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("Manifest-Version: 1.0\r\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\r\n", k, attrs[k])
	}
	b.WriteString("Created-By: handlerkit jvmtest\r\n\r\n")
	if _, err := zw.Create("META-INF/"); err != nil {
		return err
	}
	w, err := zw.Create("META-INF/MANIFEST.MF")
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// WaitReady reads the sample application's stdout from r until it prints SampleReadyLine, then keeps draining r
// in the background, so that the application never blocks on a full pipe. It fails when r ends first or when
// timeout passes.
func WaitReady(r io.Reader, timeout time.Duration) error {
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if strings.Contains(sc.Text(), SampleReadyLine) {
				ready <- true
				_, _ = io.Copy(io.Discard, r)
				return
			}
		}
		ready <- false
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case ok := <-ready:
		if !ok {
			return errors.New("jvmtest: the application's output ended before it was ready")
		}
		return nil
	case <-timer.C:
		return fmt.Errorf("jvmtest: the application was not ready within %s", timeout)
	}
}
