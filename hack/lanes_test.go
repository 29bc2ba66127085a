package hack

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// testenvPath is the package whose WithNode and WithServiceProxy start a
// cluster-mode node.
const testenvPath = "github.com/handlerkit/handlerkit/pkg/testenv"

// nodeOptions are testenv's options that start a node (and so take the
// machine-wide node lock).
var nodeOptions = []string{"WithNode", "WithServiceProxy"}

// TestNodePackagesAreListed keeps the Makefile's NODE_PKGS honest: `make test`
// runs those packages one after another in the node lane and every other
// package beside them, so a package whose tests start a node but is missing
// from the list would wait for the node lock in the other lane (its -timeout
// running), and a listed package that starts none would be serialised for
// nothing. A package counts when its test files use testenv.WithNode or
// WithServiceProxy, or import (directly or through other packages of the
// repository) a non-test package that does; a package's own non-test code
// does not count (hack/demo's main starts a node, its test runs the demo with
// -idle, which starts none). The test-only modules (bench,
// test/monitoring, test/helm) run in the other lane, so none of their packages
// may start a node. LONG_PKGS, which the other lane runs first, must name
// packages that exist and start no node.
func TestNodePackagesAreListed(t *testing.T) {
	root := repoRoot(t)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	listed := makeList(t, string(makefile), "NODE_PKGS")
	long := makeList(t, string(makefile), "LONG_PKGS")
	pkgs := scanPackages(t, root)
	starts := nodeStarters(pkgs)

	var want []string
	for dir, p := range pkgs {
		if !starts(dir, true) {
			continue
		}
		if p.module != "." {
			t.Errorf("the tests of ./%s (module %s) start a node: the test-only modules run beside the node lane, "+
				"so move that test into a package of the main module and add it to NODE_PKGS", dir, p.module)
			continue
		}
		want = append(want, "./"+dir)
	}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(listed))
	for _, dir := range want {
		if !slices.Contains(got, dir) {
			t.Errorf("the tests of %s start a node (testenv.WithNode or WithServiceProxy) but the Makefile's NODE_PKGS "+
				"does not list it: add it there, so that make test runs it in the node lane", dir)
		}
	}
	for _, dir := range got {
		if !slices.Contains(want, dir) {
			t.Errorf("the Makefile's NODE_PKGS lists %s, whose tests start no node: remove it from NODE_PKGS", dir)
		}
	}
	for _, dir := range long {
		p, ok := pkgs[strings.TrimPrefix(dir, "./")]
		switch {
		case !ok || !p.hasTests:
			t.Errorf("the Makefile's LONG_PKGS lists %s, which is not a package with tests of the main module", dir)
		case slices.Contains(want, dir):
			t.Errorf("the Makefile's LONG_PKGS lists %s, which starts a node: it belongs to NODE_PKGS only", dir)
		}
	}
	if len(want) == 0 {
		t.Fatal("found no package whose tests start a node: the scan is broken")
	}
}

// makeList returns the words of a `NAME := ...` (or =, ?=) assignment in the
// Makefile, continuation lines included.
func makeList(t *testing.T, makefile, name string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*[:?]?=((?:.*\\\n)*.*)$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatalf("the Makefile assigns no %s", name)
	}
	return strings.Fields(strings.ReplaceAll(m[1], "\\\n", " "))
}

// goPackage is what the scan keeps of one directory's Go files.
type goPackage struct {
	module     string          // the directory of its go.mod, relative to the root ("." for the main module)
	hasTests   bool            // it has _test.go files
	usesNode   bool            // its non-test files use a node option
	testsNode  bool            // its test files use a node option
	imports    map[string]bool // import paths of its non-test files
	testImport map[string]bool // import paths of its test files
}

// scanPackages parses every Go file of the repository (all modules, no
// testdata) and returns the packages by directory relative to root.
func scanPackages(t *testing.T, root string) map[string]*goPackage {
	t.Helper()
	pkgs := map[string]*goPackage{}
	modules := map[string]bool{".": true}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" ||
				name == "vendor" || name == "node_modules" || name == "target" || rel == "bin") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				modules[rel] = true
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		p := pkgs[dir]
		if p == nil {
			p = &goPackage{module: moduleOf(modules, dir), imports: map[string]bool{}, testImport: map[string]bool{}}
			pkgs[dir] = p
		}
		test := strings.HasSuffix(rel, "_test.go")
		imports := p.imports
		if test {
			p.hasTests = true
			imports = p.testImport
		}
		for _, imp := range f.Imports {
			if path, err := strconv.Unquote(imp.Path.Value); err == nil {
				imports[path] = true
			}
		}
		if usesNodeOption(f, dir == "pkg/testenv") {
			if test {
				p.testsNode = true
			} else {
				p.usesNode = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// moduleOf returns the innermost module directory that holds dir.
func moduleOf(modules map[string]bool, dir string) string {
	for d := dir; ; d = filepath.ToSlash(filepath.Dir(d)) {
		if modules[d] {
			return d
		}
		if d == "." {
			return "."
		}
	}
}

// usesNodeOption says whether the file refers to testenv.WithNode or
// WithServiceProxy (inside package testenv: to the bare names).
func usesNodeOption(f *ast.File, inTestenv bool) bool {
	local := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == testenvPath {
			local = "testenv"
			if imp.Name != nil {
				local = imp.Name.Name
			}
		}
	}
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && local != "" && x.Name == local && slices.Contains(nodeOptions, n.Sel.Name) {
				found = true
			}
		case *ast.Ident:
			if inTestenv && slices.Contains(nodeOptions, n.Name) {
				found = true
			}
		}
		return !found
	})
	return found
}

// nodeStarters returns a function that says whether a package's tests (test
// true) or its non-test code (test false) start a node: through a node option
// used in them, or through a package of the repository they import whose
// non-test code does. Package testenv itself does not count as such an
// import: every package that uses it imports it.
func nodeStarters(pkgs map[string]*goPackage) func(dir string, test bool) bool {
	const prefix = "github.com/handlerkit/handlerkit/"
	memo := map[string]bool{}
	visiting := map[string]bool{}
	var code func(dir string) bool
	through := func(imports map[string]bool) bool {
		for path := range imports {
			dir, ok := strings.CutPrefix(path, prefix)
			if !ok || path == testenvPath || pkgs[dir] == nil {
				continue
			}
			if code(dir) {
				return true
			}
		}
		return false
	}
	code = func(dir string) bool {
		if v, ok := memo[dir]; ok {
			return v
		}
		if visiting[dir] {
			return false
		}
		visiting[dir] = true
		v := dir != "pkg/testenv" && (pkgs[dir].usesNode || through(pkgs[dir].imports))
		memo[dir] = v
		return v
	}
	return func(dir string, test bool) bool {
		p := pkgs[dir]
		if !test {
			return code(dir)
		}
		return p.hasTests && (p.testsNode || through(p.testImport))
	}
}
