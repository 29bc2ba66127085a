package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// chartMeta is what PackageChart reads of Chart.yaml.
type chartMeta struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// PackageChart writes the chart in chartDir as `helm package` does, into
// outDir/<name>-<version>.tgz, and returns the file: a gzip'd tar of the
// chart's files under "<name>/", without those its .helmignore names (and
// hidden files under templates/, which Helm always leaves out). The main
// module does not import Helm (test/helm proves that Helm loads the result
// and renders it as the chart's directory). When registry is not
// DefaultRegistry, values.yaml's image.repository names
// <registry>/jmx-agent, as the install manifests do. Entries are sorted,
// owned by root, dated at the epoch: the same chart gives the same bytes.
func PackageChart(chartDir, outDir, registry string) (string, error) {
	data, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return "", fmt.Errorf("release: %w", err)
	}
	var meta chartMeta
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return "", fmt.Errorf("release: %s/Chart.yaml: %w", chartDir, err)
	}
	if meta.Name == "" || meta.Version == "" || strings.ContainsAny(meta.Name+meta.Version, "/ ") {
		return "", fmt.Errorf("release: %s/Chart.yaml: name %q, version %q", chartDir, meta.Name, meta.Version)
	}
	ignore, err := readHelmignore(chartDir)
	if err != nil {
		return "", err
	}
	var files []string
	err = filepath.WalkDir(chartDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(chartDir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignore.ignored(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() {
			if !d.Type().IsRegular() {
				return fmt.Errorf("%s is not a regular file", p)
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("release: chart %s: %w", chartDir, err)
	}
	sort.Strings(files)
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return "", fmt.Errorf("release: %w", err)
	}
	tw := tar.NewWriter(gz)
	epoch := time.Unix(0, 0).UTC()
	for _, rel := range files {
		content, err := os.ReadFile(filepath.Join(chartDir, filepath.FromSlash(rel)))
		if err != nil {
			return "", fmt.Errorf("release: %w", err)
		}
		if rel == "values.yaml" && registry != "" && registry != DefaultRegistry {
			if content, err = moveRepository(content, registry); err != nil {
				return "", err
			}
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: meta.Name + "/" + rel, Mode: 0o644, Size: int64(len(content)),
			ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return "", fmt.Errorf("release: %w", err)
		}
		if _, err := tw.Write(content); err != nil {
			return "", fmt.Errorf("release: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return "", fmt.Errorf("release: %w", err)
	}
	if err := gz.Close(); err != nil {
		return "", fmt.Errorf("release: %w", err)
	}
	out := filepath.Join(outDir, meta.Name+"-"+meta.Version+".tgz")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("release: %w", err)
	}
	return out, nil
}

// moveRepository rewrites values.yaml's one `repository:
// <DefaultRegistry>/jmx-agent` line to registry's.
func moveRepository(values []byte, registry string) ([]byte, error) {
	old := []byte("repository: " + DefaultRegistry + "/" + ImageRepository + "\n")
	if n := bytes.Count(values, old); n != 1 {
		return nil, fmt.Errorf("release: the chart's values.yaml has %d lines %q, want one", n, bytes.TrimSpace(old))
	}
	return bytes.Replace(values, old, []byte("repository: "+registry+"/"+ImageRepository+"\n"), 1), nil
}

// helmignore is the subset of .helmignore's rules PackageChart supports:
// path.Match patterns against the base name, or against the path from the
// chart's root when they hold a "/", a trailing "/" for directories only.
type helmignore []string

// readHelmignore reads chartDir/.helmignore (none is no rules); negations
// and "**" are refused rather than misread.
func readHelmignore(chartDir string) (helmignore, error) {
	// Helm's default rule: hidden files under templates/.
	rules := helmignore{"templates/.?*"}
	f, err := os.Open(filepath.Join(chartDir, ".helmignore"))
	if os.IsNotExist(err) {
		return rules, nil
	}
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") || strings.Contains(line, "**") {
			return nil, fmt.Errorf("release: .helmignore rule %q: negations and ** are not supported here", line)
		}
		if _, err := path.Match(strings.TrimSuffix(line, "/"), ""); err != nil {
			return nil, fmt.Errorf("release: .helmignore rule %q: %w", line, err)
		}
		rules = append(rules, strings.TrimPrefix(line, "/"))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	return rules, nil
}

// ignored says whether rel (slash-separated, from the chart's root) is left
// out.
func (h helmignore) ignored(rel string, dir bool) bool {
	for _, r := range h {
		dirOnly := strings.HasSuffix(r, "/")
		r = strings.TrimSuffix(r, "/")
		if dirOnly && !dir {
			continue
		}
		target := path.Base(rel)
		if strings.Contains(r, "/") {
			target = rel
		}
		if ok, _ := path.Match(r, target); ok {
			return true
		}
	}
	return false
}

// readTgz returns the regular files of a gzip'd tar by name.
func readTgz(tgz []byte) (map[string][]byte, error) {
	gz, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	defer gz.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[hdr.Name] = data
	}
}
