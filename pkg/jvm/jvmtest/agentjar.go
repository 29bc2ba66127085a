package jvmtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
)

// The project's own JMX exporter agent (agent/, docs/agent.md): what tests, the demo and the production image
// load.
const (
	// AgentClass is the Agent-Class and Premain-Class of the project's agent jar (AgentJar).
	AgentClass = "dev.handlerkit.jmxagent.Agent"
	// AgentJarFile is the file name of the jar AgentJar builds.
	AgentJarFile = "handlerkit-jmx-agent.jar"
	// AgentLinePrefix starts the one line the agent prints on the JVM's stderr for each load; the state follows
	// it ("serving on ..." or "refused: <reason>: <message>"). Counting these lines counts loads on every JDK.
	AgentLinePrefix = "handlerkit-jmx-agent: "
	// AgentStatusFile is the name of the status file the agent writes next to its config file.
	AgentStatusFile = "agent-status.json"
)

var agentMu sync.Mutex

// AgentSourceDir returns the directory of the agent's Maven project (agent/ at the module root). It is found from
// this file's own location when the test binary was built from source, else from HANDLERKIT_AGENT_SRC, else by
// walking up from the working directory to a directory holding agent/pom.xml.
func AgentSourceDir() (string, error) {
	if dir := os.Getenv("HANDLERKIT_AGENT_SRC"); dir != "" {
		return checkAgentDir(dir)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		if dir, err := checkAgentDir(filepath.Join(filepath.Dir(file), "..", "..", "..", "agent")); err == nil {
			return dir, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("jvmtest: agent source: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if d, err := checkAgentDir(filepath.Join(dir, "agent")); err == nil {
			return d, nil
		}
		if filepath.Dir(dir) == dir {
			return "", errors.New("jvmtest: agent source (agent/pom.xml) not found from this file, HANDLERKIT_AGENT_SRC or the working directory")
		}
	}
}

func checkAgentDir(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "pom.xml")); err != nil {
		return "", fmt.Errorf("jvmtest: %s is not the agent's source: %w", dir, err)
	}
	return filepath.Clean(dir), nil
}

// AgentInputs returns the agent's build inputs under src (the agent/ directory), relative and sorted: pom.xml
// and every file under src/.
func AgentInputs(src string) ([]string, error) {
	files := []string{"pom.xml"}
	err := filepath.WalkDir(filepath.Join(src, "src"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(src, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("jvmtest: agent inputs: %w", err)
	}
	sort.Strings(files)
	return files, nil
}

// AgentInputsSHA256 returns the SHA-256 that pins the agent: over each input's relative path and contents (see
// AgentInputs). The pom pins every dependency and plugin version, so equal digests build equal agents.
func AgentInputsSHA256(src string) (string, error) {
	files, err := AgentInputs(src)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, rel := range files {
		data, err := os.ReadFile(filepath.Join(src, filepath.FromSlash(rel)))
		if err != nil {
			return "", fmt.Errorf("jvmtest: agent inputs: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// AgentJar returns the path of the project's agent jar, building it with Maven when it is not cached:
// ${XDG_CACHE_HOME:-$HOME/.cache}/handlerkit/agent/<AgentInputsSHA256>/handlerkit-jmx-agent.jar. The build runs
// `mvn -q -B package` on a copy of the sources, offline first (a warm ~/.m2 needs no network) and online if that
// fails. Concurrent callers in one process share one build; callers in several processes each build into a
// temporary directory and rename, so a half-written jar is never seen.
func AgentJar(ctx context.Context) (string, error) {
	agentMu.Lock()
	defer agentMu.Unlock()
	src, err := AgentSourceDir()
	if err != nil {
		return "", err
	}
	sum, err := AgentInputsSHA256(src)
	if err != nil {
		return "", err
	}
	cache, err := JMXExporterCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, sum)
	jar := filepath.Join(dir, AgentJarFile)
	if fi, err := os.Stat(jar); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
		return jar, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("jvmtest: %w", err)
	}
	tmp, err := os.MkdirTemp(cache, ".build-")
	if err != nil {
		return "", fmt.Errorf("jvmtest: %w", err)
	}
	defer os.RemoveAll(tmp)
	built, err := buildAgent(ctx, src, tmp)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(built, 0o644); err != nil {
		return "", fmt.Errorf("jvmtest: %w", err)
	}
	if err := os.Rename(built, jar); err != nil {
		return "", fmt.Errorf("jvmtest: %w", err)
	}
	return jar, nil
}

// buildAgent copies the agent's inputs from src into work and runs Maven there; it returns the built jar.
func buildAgent(ctx context.Context, src, work string) (string, error) {
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", fmt.Errorf("jvmtest: building the agent needs Maven (Debian: apt-get install maven): %w", err)
	}
	files, err := AgentInputs(src)
	if err != nil {
		return "", err
	}
	copyDir := filepath.Join(work, "agent")
	for _, rel := range files {
		data, err := os.ReadFile(filepath.Join(src, filepath.FromSlash(rel)))
		if err != nil {
			return "", fmt.Errorf("jvmtest: %w", err)
		}
		dst := filepath.Join(copyDir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", fmt.Errorf("jvmtest: %w", err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return "", fmt.Errorf("jvmtest: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, mvnTimeout)
	defer cancel()
	target := filepath.Join(work, "target")
	run := func(offline bool) ([]byte, error) {
		args := []string{"-q", "-B"}
		if offline {
			args = append(args, "-o")
		}
		args = append(args, "package", "-DbuildDirectory="+target)
		cmd := exec.CommandContext(ctx, mvn, args...)
		cmd.Dir = copyDir
		return cmd.CombinedOutput()
	}
	if _, err := run(true); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("jvmtest: mvn package (offline): %w", ctx.Err())
		}
		if out, err := run(false); err != nil {
			return "", fmt.Errorf("jvmtest: mvn -q -B package in %s: %w\n%s", src, err, tail(out, 4000))
		}
	}
	jar := filepath.Join(target, AgentJarFile)
	if fi, err := os.Stat(jar); err != nil || fi.Size() == 0 {
		return "", fmt.Errorf("jvmtest: mvn package left no %s in %s: %v", AgentJarFile, target, err)
	}
	return jar, nil
}
