package main

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/handlerkit/handlerkit/pkg/jvm"
)

const copyAgentHelp = `Usage: jmx-attach copy-agent [--from JAR] --to DIR

Copies the agent jar into DIR, for a JVM that loads it at start with -javaagent (the init container of the
operator's start-time injection, docs/atstart.md: the agent image has no shell and no cp). The jar is checked
first: a regular file of at most 256 MiB, a zip whose manifest names a Premain-Class (a JVM started with
-javaagent of a jar without one does not start). The copy is written beside its final name, read-only for
everyone (0444), synced, checked again and renamed to DIR/<base name of JAR>, so a JVM never sees half a jar.

Flags:
  --from JAR   the agent jar (default /opt/handlerkit/jmx-agent.jar)
  --to DIR     the directory to copy into (required; it must exist)

Exit codes: 0 copied, 1 the copy failed, 2 bad command line, 4 the jar is not a usable agent.
`

// copyAgentMaxJar bounds the jar read into memory.
const copyAgentMaxJar = 256 << 20

func runCopyAgent(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("copy-agent")
	from := fs.String("from", "/opt/handlerkit/jmx-agent.jar", "")
	to := fs.String("to", "", "")
	if code, stop := parseFlags(fs, args, copyAgentHelp, stdout, stderr); stop {
		return code
	}
	if *to == "" || *from == "" {
		fmt.Fprintf(stderr, "jmx-attach copy-agent: --from and --to are required\n\n%s", copyAgentHelp)
		return exitUsage
	}
	data, class, err := readPremainJar(*from)
	if err != nil {
		fmt.Fprintf(stderr, "jmx-attach copy-agent: %v\n", err)
		return exitBadAgent
	}
	dst := filepath.Join(*to, filepath.Base(*from))
	if err := writeReadOnly(dst, data); err != nil {
		fmt.Fprintf(stderr, "jmx-attach copy-agent: %v\n", err)
		return exitFailed
	}
	fmt.Fprintf(stdout, "copied %s to %s (%d bytes, Premain-Class %s)\n", *from, dst, len(data), class)
	return exitOK
}

// readPremainJar reads the jar at file and returns it with its manifest's Premain-Class.
func readPremainJar(file string) ([]byte, string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, "", fmt.Errorf("agent jar: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", fmt.Errorf("agent jar: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, "", fmt.Errorf("agent jar %s is not a regular file", file)
	}
	data, err := io.ReadAll(io.LimitReader(f, copyAgentMaxJar+1))
	if err != nil {
		return nil, "", fmt.Errorf("agent jar: %w", err)
	}
	if len(data) > copyAgentMaxJar {
		return nil, "", fmt.Errorf("agent jar %s is larger than %d bytes", file, copyAgentMaxJar)
	}
	class, err := premainClass(data)
	if err != nil {
		return nil, "", fmt.Errorf("agent jar %s: %w", file, err)
	}
	return data, class, nil
}

// premainClass returns the Premain-Class of the jar in data.
func premainClass(data []byte) (string, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return "", err
	}
	for _, zf := range zr.File {
		if !strings.EqualFold(zf.Name, "META-INF/MANIFEST.MF") {
			continue
		}
		rc, err := zf.Open()
		if err != nil {
			return "", err
		}
		m, err := io.ReadAll(io.LimitReader(rc, 1<<20))
		rc.Close()
		if err != nil {
			return "", err
		}
		if c := jvm.ParseManifest(m)["Premain-Class"]; c != "" {
			return c, nil
		}
		return "", errors.New("its manifest names no Premain-Class")
	}
	return "", errors.New("no META-INF/MANIFEST.MF")
}

// writeReadOnly writes data to dst through a temporary file in dst's directory, mode 0444, synced, read back and
// compared, then renamed over dst.
func writeReadOnly(dst string, data []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+"-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = os.Chmod(tmp.Name(), 0o444); err != nil {
		return err
	}
	back, err := os.ReadFile(tmp.Name())
	if err != nil {
		return err
	}
	if !bytes.Equal(back, data) {
		return fmt.Errorf("the copy %s differs from the jar read", tmp.Name())
	}
	return os.Rename(tmp.Name(), dst)
}
