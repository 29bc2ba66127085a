package operator

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"

	"github.com/handlerkit/handlerkit/pkg/jvm"
)

// stringConsts returns the string constants a Go file declares, by name,
// those of type typ only when typ is not empty.
func stringConsts(t *testing.T, file, typ string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); typ != "" && (!ok || id.Name != typ) {
				continue
			}
			for i, name := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out[name.Name] = v
				}
			}
		}
	}
	return out
}

// TestEveryAttachReasonHasItsConstant: every reason jmx-attach reports
// (pkg/jvm's Reason constants) has its meaning in attachReasons, and the
// reason the operator writes for it is a constant of pkg/apis (issue 43:
// every condition and Event reason in one home), so that a reason added to
// jmx-attach cannot reach a status without one.
func TestEveryAttachReasonHasItsConstant(t *testing.T) {
	reasons := stringConsts(t, "../jvm/result.go", "Reason")
	if len(reasons) < 30 {
		t.Fatalf("found %d Reason constants in pkg/jvm/result.go: the parse is wrong", len(reasons))
	}
	apis := map[string]bool{}
	for _, v := range stringConsts(t, "../apis/jmx/v1alpha1/conditions.go", "") {
		apis[v] = true
	}
	for name, value := range reasons {
		a, ok := attachReasons[jvm.Reason(value)]
		if !ok {
			t.Errorf("jvm.%s (%q) has no entry in attachReasons", name, value)
			continue
		}
		if !apis[a.reason] {
			t.Errorf("jvm.%s maps to %q, which is no constant of pkg/apis/jmx/v1alpha1/conditions.go", name, a.reason)
		}
	}
	if r, _ := failureReason(""); r != "Unknown" {
		t.Errorf("an empty reason is %q, want Unknown", r)
	}
	if r, permanent := failureReason("a-reason-of-tomorrow"); r != "AReasonOfTomorrow" || !permanent {
		t.Errorf("an unknown reason is %q (permanent %v), want AReasonOfTomorrow, not retried", r, permanent)
	}
}
