// Command chartdoc writes a Helm chart's README.md from its Chart.yaml, the
// comments in its values.yaml and the template README.md.gotmpl, the way
// helm-docs does for the charts admins already run, with no dependency
// beyond this module's YAML parser.
//
// A value is documented by a comment that starts with "# --" right above its
// key; the comment runs on over the following "#" lines:
//
//	# -- Labels on every PodMonitor the operator writes.
//	# For kube-prometheus-stack: `{release: <its release name>}`.
//	labels: {}
//
// Every value must be documented, itself or through an ancestor: a value
// nobody documented fails the run. With -check, chartdoc writes nothing and
// fails when README.md differs from what it would write (make verify).
//
//	chartdoc [-check] CHART_DIR
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"go.yaml.in/yaml/v3"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "chartdoc:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("chartdoc", flag.ContinueOnError)
	check := fs.Bool("check", false, "write nothing; fail when README.md is stale")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: chartdoc [-check] CHART_DIR")
	}
	dir := fs.Arg(0)
	want, err := Render(dir)
	if err != nil {
		return err
	}
	readme := filepath.Join(dir, "README.md")
	if *check {
		got, err := os.ReadFile(readme)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s is stale: run 'make chart'", readme)
		}
		return nil
	}
	if err := os.WriteFile(readme, want, 0o644); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "wrote %s\n", readme)
	return err
}

// Chart is what README.md.gotmpl sees: Chart.yaml's fields and the
// documented values.
type Chart struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	Version     string `yaml:"version"`
	AppVersion  string `yaml:"appVersion"`
	KubeVersion string `yaml:"kubeVersion"`
	Home        string `yaml:"home"`
	// Values are the documented values, in values.yaml's order.
	Values []Value `yaml:"-"`
}

// Value is one documented value.
type Value struct {
	// Key is the value's path, such as image.repository.
	Key string
	// Type is string, bool, int, float, list, object or null.
	Type string
	// Default is the value in values.yaml, as JSON.
	Default string
	// Description is the "# --" comment, its lines joined by spaces.
	Description string
}

// Render returns the README.md of the chart in dir.
func Render(dir string) ([]byte, error) {
	var c Chart
	if err := readYAML(filepath.Join(dir, "Chart.yaml"), &c); err != nil {
		return nil, err
	}
	var values yaml.Node
	if err := readYAML(filepath.Join(dir, "values.yaml"), &values); err != nil {
		return nil, err
	}
	vals, err := Values(&values)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "values.yaml"), err)
	}
	c.Values = vals
	name := filepath.Join(dir, "README.md.gotmpl")
	text, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	tmpl, err := template.New(filepath.Base(name)).Option("missingkey=error").Funcs(template.FuncMap{
		"valuesTable": valuesTable,
	}).Parse(string(text))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, c); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func readYAML(file string, v any) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// Values returns the documented values of a values.yaml document, in order.
// It fails on a value that neither it nor an ancestor documents.
func Values(doc *yaml.Node) ([]Value, error) {
	root := doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, nil
		}
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, errors.New("values are not a mapping")
	}
	var out []Value
	var undocumented []string
	var walk func(m *yaml.Node, prefix string, documented bool) error
	walk = func(m *yaml.Node, prefix string, documented bool) error {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			key := prefix + k.Value
			desc, ok := description(k.HeadComment)
			if ok {
				if desc == "" {
					return fmt.Errorf("line %d: %s: empty \"# --\" comment", k.Line, key)
				}
				def, typ, err := render(v)
				if err != nil {
					return fmt.Errorf("line %d: %s: %w", k.Line, key, err)
				}
				out = append(out, Value{Key: key, Type: typ, Default: def, Description: desc})
			}
			if v.Kind == yaml.MappingNode && len(v.Content) > 0 && !ok {
				if err := walk(v, key+".", documented); err != nil {
					return err
				}
				continue
			}
			if !ok && !documented {
				undocumented = append(undocumented, key)
			}
		}
		return nil
	}
	if err := walk(root, "", false); err != nil {
		return nil, err
	}
	if len(undocumented) > 0 {
		return nil, fmt.Errorf("values without a \"# --\" comment: %s", strings.Join(undocumented, ", "))
	}
	return out, nil
}

// description returns the text of the "# --" comment in a key's head
// comment: from its "# --" line to the end, lines joined by spaces.
// Comment lines above it (a section's heading) are not part of it.
func description(head string) (string, bool) {
	lines := strings.Split(head, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "# --") {
			start = i
		}
	}
	if start < 0 {
		return "", false
	}
	var words []string
	for i, l := range lines[start:] {
		l = strings.TrimSpace(l)
		if l == "" {
			// A blank line ends the comment that belongs to the key.
			return "", false
		}
		l = strings.TrimSpace(strings.TrimPrefix(l, "#"))
		if i == 0 {
			l = strings.TrimSpace(strings.TrimPrefix(l, "--"))
		}
		if l != "" {
			words = append(words, l)
		}
	}
	return strings.Join(words, " "), true
}

// render returns a value node as compact JSON and its type.
func render(n *yaml.Node) (string, string, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return "", "", err
	}
	typ := "object"
	switch v.(type) {
	case nil:
		typ = "null"
	case string:
		typ = "string"
	case bool:
		typ = "bool"
	case int, int64, uint64:
		typ = "int"
	case float64:
		typ = "float"
	case []any:
		typ = "list"
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", "", err
	}
	return strings.TrimSpace(buf.String()), typ, nil
}

// valuesTable is the values as a Markdown table.
func valuesTable(values []Value) string {
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Description |\n| --- | --- | --- | --- |\n")
	for _, v := range values {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", v.Key, v.Type, cell(v.Default), cell(v.Description))
	}
	return b.String()
}

// cell escapes what would end a Markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
