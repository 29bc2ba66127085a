package release

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// WriteSums writes file in `sha256sum` format ("<hex>  <name>" lines, names
// relative to file's directory) over files, which must be in that
// directory, so that `sha256sum -c SHA256SUMS` run there checks them.
func WriteSums(file string, files ...string) error {
	dir := filepath.Dir(file)
	var buf bytes.Buffer
	for _, f := range files {
		if filepath.Dir(f) != dir {
			return fmt.Errorf("release: %s is not in %s", f, dir)
		}
		sum, err := sha256File(f)
		if err != nil {
			return err
		}
		fmt.Fprintf(&buf, "%s  %s\n", sum, filepath.Base(f))
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// VerifySums checks every line of a SHA256SUMS file against the files
// beside it, as `sha256sum -c` does, and returns the names it checked. A
// missing file, a changed one or a malformed line is an error.
func VerifySums(file string) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	dir := filepath.Dir(file)
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		want, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(want) != sha256.Size*2 || name == "" || strings.ContainsAny(name, "/\\") {
			return nil, fmt.Errorf("release: %s:%d: not a sha256sum line: %q", file, n, sc.Text())
		}
		got, err := sha256File(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if got != want {
			return nil, fmt.Errorf("release: %s: sha256 %s, %s says %s", name, got, file, want)
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("release: %s lists no files", file)
	}
	return names, nil
}

func sha256File(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("release: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("release: %s: %w", file, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
