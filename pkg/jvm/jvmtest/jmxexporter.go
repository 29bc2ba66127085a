package jvmtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/handlerkit/handlerkit/internal/cachedir"
)

// The real Prometheus JMX exporter java agent that end-to-end tests and the demo load.
//
// 1.0.1 is the last javaagent release published to Maven Central; later releases are published elsewhere only.
// Production images pin the current release separately (see the Dockerfile).
const (
	// JMXExporterGroup and JMXExporterArtifact are the agent's Maven coordinates.
	JMXExporterGroup = "io.prometheus.jmx"
	// JMXExporterArtifact is the agent's Maven artifact id.
	JMXExporterArtifact = "jmx_prometheus_javaagent"
	// JMXExporterVersion is the agent release the tests and the demo use.
	JMXExporterVersion = "1.0.1"
	// JMXExporterSHA256 is the SHA-256 of jmx_prometheus_javaagent-1.0.1.jar. A fetched jar with any other digest
	// is refused.
	JMXExporterSHA256 = "7d61f737fd661610ccc14aea79764faa1ea94a340cbc8f0029b3d2edea3d80c1"
	// JMXExporterAgentClass is the jar's Agent-Class.
	JMXExporterAgentClass = "io.prometheus.jmx.JavaAgent"
)

// mvnTimeout bounds one Maven run: a cold Maven fetches its dependency plugin first.
const mvnTimeout = 10 * time.Minute

var jmxExporterMu sync.Mutex

// JMXExporterCacheDir is where JMXExporterJar keeps the jar:
// ${XDG_CACHE_HOME:-$HOME/.cache}/handlerkit/agent.
func JMXExporterCacheDir() (string, error) {
	dir, err := cachedir.Dir("agent")
	if err != nil {
		return "", fmt.Errorf("jvmtest: %w", err)
	}
	return dir, nil
}

// JMXExporterJar returns the path of the real jmx_prometheus_javaagent jar (JMXExporterVersion), fetching it
// with `mvn dependency:copy` into JMXExporterCacheDir when it is not cached there. The digest of the cached
// or fetched jar is checked against JMXExporterSHA256 every time; a jar that does not match is removed and
// fetched again once. Concurrent callers in one process share one fetch; callers in several processes each
// fetch into a temporary directory and rename, so a half-written jar is never seen.
func JMXExporterJar(ctx context.Context) (string, error) {
	jmxExporterMu.Lock()
	defer jmxExporterMu.Unlock()
	dir, err := JMXExporterCacheDir()
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s-%s.jar", JMXExporterArtifact, JMXExporterVersion)
	jar := filepath.Join(dir, name)
	if err := checkSHA256(jar, JMXExporterSHA256); err == nil {
		return jar, nil
	} else if !os.IsNotExist(err) {
		_ = os.Remove(jar)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("jvmtest: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, ".fetch-")
	if err != nil {
		return "", fmt.Errorf("jvmtest: %w", err)
	}
	defer os.RemoveAll(tmp)
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", fmt.Errorf("jvmtest: fetching %s %s needs Maven (Debian: apt-get install maven): %w",
			JMXExporterArtifact, JMXExporterVersion, err)
	}
	ctx, cancel := context.WithTimeout(ctx, mvnTimeout)
	defer cancel()
	artifact := fmt.Sprintf("%s:%s:%s", JMXExporterGroup, JMXExporterArtifact, JMXExporterVersion)
	cmd := exec.CommandContext(ctx, mvn, "-B", "-q", "dependency:copy",
		"-Dartifact="+artifact, "-DoutputDirectory="+tmp, "-Dmdep.overWriteReleases=true")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("jvmtest: mvn dependency:copy -Dartifact=%s: %w\n%s", artifact, err, tail(out, 2000))
	}
	fetched := filepath.Join(tmp, name)
	if err := checkSHA256(fetched, JMXExporterSHA256); err != nil {
		return "", fmt.Errorf("jvmtest: fetched %s: %w", artifact, err)
	}
	if err := os.Chmod(fetched, 0o644); err != nil {
		return "", fmt.Errorf("jvmtest: %w", err)
	}
	if err := os.Rename(fetched, jar); err != nil {
		return "", fmt.Errorf("jvmtest: %w", err)
	}
	return jar, nil
}

// checkSHA256 returns nil when file's SHA-256 is want, an error wrapping fs.ErrNotExist when there is no file,
// and an error naming both digests otherwise.
func checkSHA256(file, want string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("sha256 of %s is %s, want %s", file, got, want)
	}
	return nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
