package docslint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// docFiles are the Markdown files users read: docs/, the README and the
// chart's README (and the chart's values.yaml, whose comments become it).
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	charts, err := filepath.Glob(filepath.Join(root, "charts", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	values, err := filepath.Glob(filepath.Join(root, "charts", "*", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(append(append(files, filepath.Join(root, "README.md")), charts...), values...)
	if len(files) < 10 {
		t.Fatalf("found only %d doc files: %v", len(files), files)
	}
	return files
}

// goFiles parses every non-test Go file of the module (and the bench and
// test modules), skipping generated clients.
func goFiles(t *testing.T) []*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	var out []*ast.File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "generated", "bin", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		out = append(out, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// stringLiterals are the values of every string literal in files.
func stringLiterals(files []*ast.File) map[string]bool {
	out := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					out[s] = true
				}
			}
			return true
		})
	}
	return out
}

// flagNames are the names of the flags the module's commands define: the
// second argument of a flag.FlagSet's XxxVar and Var, the first of its
// String, Bool, Int, Duration, Func and the like, when it is a literal.
func flagNames(files []*ast.File) map[string]bool {
	nameFirst := map[string]bool{"String": true, "Bool": true, "Int": true, "Int64": true, "Uint": true, "Uint64": true,
		"Float64": true, "Duration": true, "Func": true, "BoolFunc": true, "TextVar": false}
	out := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			idx := -1
			switch {
			case nameFirst[sel.Sel.Name]:
				idx = 0
			case strings.HasSuffix(sel.Sel.Name, "Var") && len(sel.Sel.Name) > 3 || sel.Sel.Name == "Var":
				idx = 1
			}
			if idx < 0 || len(call.Args) <= idx {
				return true
			}
			if lit, ok := call.Args[idx].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					out[s] = true
				}
			}
			return true
		})
	}
	return out
}

// inCode is a backquoted span of Markdown.
var inCode = regexp.MustCompile("`([^`\n]+)`")

// codeSpans are the backquoted spans of every doc file, by file.
func codeSpans(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, path := range docFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range inCode.FindAllStringSubmatch(string(data), -1) {
			out[path] = append(out[path], m[1])
		}
	}
	return out
}

// metricName is a series the project itself exports (the agent's and the
// JVM's are jmx_exporter's and the JVM's own).
var metricName = regexp.MustCompile(`\b(?:handlerkit|jmx_operator)_[a-z0-9_]*[a-z0-9]\b`)

// TestEveryMetricTheDocsNameExists: a metric name of the project's own
// (handlerkit_*, jmx_operator_*) that the docs name is defined in the code,
// as the literal name of a collector (a histogram's _bucket, _sum and
// _count, and a counter's name without _total, count as its own).
func TestEveryMetricTheDocsNameExists(t *testing.T) {
	lits := stringLiterals(goFiles(t))
	known := func(name string) bool {
		if lits[name] {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && lits[base] {
				return true
			}
		}
		return lits[name+"_total"]
	}
	checked := 0
	for path, spans := range codeSpans(t) {
		for _, span := range spans {
			for _, name := range metricName.FindAllString(span, -1) {
				if strings.HasPrefix(name, "handlerkit_test") || strings.Contains(span, name+".") {
					continue // a file or a Go identifier, not a series
				}
				checked++
				if !known(name) {
					t.Errorf("%s names metric %s, which no collector defines", rel(path), name)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d metric names found in the docs: the pattern no longer matches them", checked)
	}
}

// externalFlags are flags of other programs the docs show (kubectl, helm,
// go, java, the Kubernetes components, Prometheus), which no command of
// this module defines.
var externalFlags = []string{
	"all", "authorization-mode", "bench", "count", "element", "endpoint-reconciler-type", "from", "from-literal",
	"hostname-override", "image-pull-policy", "jar", "javaagent", "kubeconfig", "kubelet-preferred-address-types",
	"ldflags", "local", "namespace", "node-ip", "race", "release", "root-ca-file", "run", "service-account-private-key-file",
	"service-cluster-ip-range", "set", "skip", "timeout", "trimpath", "use-service-account-credentials", "v", "vmodule",
	"web", "stderrthreshold", "logtostderr", "create-namespace", "version", "help", "values", "wait", "kustomize",
	"graceful-timeout", "log-format", "server-side", "with-watch", "cleanup", "variant", "include", "reuid", "regid",
	"clear-groups", "bounding-set", "no-new-privs", "inh-caps",
}

// flagRef is a flag as the docs write it in code: --name at the start of a
// span or after a space, with an optional =value. (A single dash is Go's
// and the JVM's style, and the docs' way of writing name suffixes such as
// -atstart: not checked.)
var flagRef = regexp.MustCompile(`(?:^|\s)--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?:[=\s]|$)`)

// TestEveryFlagTheDocsNameExists: a flag the docs show in code (`--name`,
// `--name=value`) is defined by one of the module's commands (the
// operator, jmx-attach, the bench and hack tools), or is one of
// externalFlags.
func TestEveryFlagTheDocsNameExists(t *testing.T) {
	flags := flagNames(goFiles(t))
	if !flags["breaker-window"] || !flags["agent-image"] {
		t.Fatalf("the operator's flags were not found in the code (%d flags): the parser no longer sees them", len(flags))
	}
	checked := 0
	for path, spans := range codeSpans(t) {
		for _, span := range spans {
			if !strings.HasPrefix(strings.TrimSpace(span), "--") && !strings.Contains(span, " --") {
				continue
			}
			for _, m := range flagRef.FindAllStringSubmatch(span, -1) {
				name := m[1]
				if slices.Contains(externalFlags, name) {
					continue
				}
				checked++
				if !flags[name] {
					t.Errorf("%s shows flag -%s in %q, which no command of the module defines (if another program's, add it to externalFlags)",
						rel(path), name, span)
				}
			}
		}
	}
	if checked < 30 {
		t.Fatalf("only %d flags found in the docs: the pattern no longer matches them", checked)
	}
}

// makeRef is a make command as the docs write it.
var makeRef = regexp.MustCompile(`(?:^|[\s(])make ([a-z][a-z0-9-]*)`)

// TestEveryMakeTargetTheDocsNameExists: `make <target>` in the docs (in
// code, or in the chart's values.yaml comments) names a target of the
// Makefile.
func TestEveryMakeTargetTheDocsNameExists(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(data), -1) {
		targets[m[1]] = true
	}
	if !targets["test"] || !targets["verify"] {
		t.Fatalf("the Makefile's targets were not found: %v", targets)
	}
	checked := 0
	for path, spans := range codeSpans(t) {
		for _, span := range spans {
			for _, m := range makeRef.FindAllStringSubmatch(span, -1) {
				checked++
				if !targets[m[1]] {
					t.Errorf("%s names make target %q in %q, which the Makefile does not define", rel(path), m[1], span)
				}
			}
		}
	}
	// The chart's values.yaml speaks in comments, not code spans.
	values, err := filepath.Glob(filepath.Join(root, "charts", "*", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range values {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			for _, m := range regexp.MustCompile(`\bmake ([a-z][a-z0-9-]*)`).FindAllStringSubmatch(line, -1) {
				checked++
				if !targets[m[1]] {
					t.Errorf("%s names make target %q, which the Makefile does not define", rel(path), m[1])
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d make commands found in the docs: the pattern no longer matches them", checked)
	}
}

func rel(path string) string {
	if r, err := filepath.Rel(root, path); err == nil {
		return r
	}
	return path
}

// collectorNames are the metric names the module's collectors are given:
// the literal Name of a composite literal (prometheus.CounterOpts and the
// like) that is one of the project's own series.
func collectorNames(files []*ast.File) map[string]bool {
	out := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			kv, ok := n.(*ast.KeyValueExpr)
			if !ok {
				return true
			}
			if key, ok := kv.Key.(*ast.Ident); !ok || key.Name != "Name" {
				return true
			}
			if lit, ok := kv.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && metricName.MatchString(s) && metricName.FindString(s) == s {
					out[s] = true
				}
			}
			return true
		})
	}
	return out
}

// TestMetricsMdListsEverySeries: docs/metrics.md says it lists every
// series; every collector of the project's own names is in one of its
// tables.
func TestMetricsMdListsEverySeries(t *testing.T) {
	names := collectorNames(goFiles(t))
	if !names["jmx_operator_injections_total"] || !names["handlerkit_webhook_requests_total"] {
		t.Fatalf("the collectors were not found in the code (%d names): the parser no longer sees them", len(names))
	}
	data, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if m := regexp.MustCompile("^\\| `([a-z0-9_]+)`").FindStringSubmatch(line); m != nil {
			listed[m[1]] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if !listed[name] {
			t.Errorf("docs/metrics.md lists no row for %s, which the code defines", name)
		}
	}
}

// TestTheReadmeServesItsThreeAudiences: README.md is under 150 lines, and
// its first 60 say what the project is, how to try it (make demo), how to
// install it (Helm and kustomize), the framework in a few lines, and how to
// test it (make test); the test machinery's accounting is in
// docs/development.md.
func TestTheReadmeServesItsThreeAudiences(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) >= 150 {
		t.Errorf("README.md has %d lines, want under 150", len(lines))
	}
	first := strings.Join(lines[:min(60, len(lines))], "\n")
	for _, want := range []string{"PrometheusJmxExporter operator", "framework", "make demo", "helm install ",
		"kubectl apply -k ", "sdk.Watch(", "sdk.Handle(", "sdk.Run(", "make test"} {
		if !strings.Contains(first, want) {
			t.Errorf("README.md's first 60 lines lack %q", want)
		}
	}
}
