package testenv_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// fatalRecorder records what a test would fail with, without failing.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper()                      {}
func (r *fatalRecorder) Fatal(args ...any)            { r.msg = fmt.Sprint(args...) }
func (r *fatalRecorder) Fatalf(f string, args ...any) { r.msg = fmt.Sprintf(f, args...) }

func TestStartFailureNamesTestenvOnce(t *testing.T) {
	t.Setenv(testenv.EnvKubeconfig, filepath.Join(t.TempDir(), "missing"))
	var s testenv.Shared
	r := &fatalRecorder{TB: t}
	if env := s.Get(r); env != nil {
		t.Fatal("Get returned an environment for a kubeconfig that does not exist")
	}
	if !strings.HasPrefix(r.msg, "testenv: ") || strings.Contains(r.msg, "testenv: testenv:") {
		t.Errorf("failure %q should start with one \"testenv: \"", r.msg)
	}
}
