package testenv_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// fatalRecorder is a testing.TB whose Fatalf only records the message.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

// Outside a handlerkit checkout, with no binaries where they are looked
// for, the error says what is missing and how to get it, and names the
// package once.
func TestMissingBinaryErrorNamesThePackageOnce(t *testing.T) {
	t.Setenv(testenv.EnvBinDir, t.TempDir())
	t.Chdir(t.TempDir())
	var s testenv.Shared
	r := &fatalRecorder{TB: t}
	if env := s.Get(r); env != nil {
		t.Fatal("Get returned an environment without binaries")
	}
	if !strings.HasPrefix(r.msg, "testenv: ") || strings.Count(r.msg, "testenv:") != 1 {
		t.Errorf("message %q, want one \"testenv: \" prefix", r.msg)
	}
	for _, want := range []string{"kube-apiserver not found", "make controlplane", testenv.EnvBinDir} {
		if !strings.Contains(r.msg, want) {
			t.Errorf("message %q lacks %q", r.msg, want)
		}
	}
}
