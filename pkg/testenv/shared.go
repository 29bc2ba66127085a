package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// Shared is one Environment that all the tests of a package share, each in
// a namespace of its own. It starts on first use, so a package whose unit
// tests need no cluster starts none, and Main stops it after the last test.
// The zero value is ready to use:
//
//	var cluster testenv.Shared
//
//	func TestMain(m *testing.M) { os.Exit(cluster.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		env := cluster.Get(t)
//		...
//	}
type Shared struct {
	// Options are passed to Start.
	Options []Option
	// Setup, when set, runs once right after the Environment starts, for
	// example to install the package's CRDs. Its error fails every test that
	// asks for the Environment.
	Setup func(ctx context.Context, env *Environment) error

	once sync.Once
	env  *Environment
	err  error
}

// Get returns the shared Environment, starting it on first use, and fails t
// when it cannot start or its Setup failed.
func (s *Shared) Get(t testing.TB) *Environment {
	t.Helper()
	s.once.Do(func() {
		s.env, s.err = Start(context.Background(), s.Options...)
		if s.err == nil && s.Setup != nil {
			if err := s.Setup(context.Background(), s.env); err != nil {
				s.err = fmt.Errorf("testenv: setting up the shared environment: %w", err)
			}
		}
	})
	if s.err != nil {
		t.Fatalf("%s", prefixed(s.err))
	}
	return s.env
}

// Main runs the package's tests, then stops the Environment if one was
// started, and returns the exit code for os.Exit. A failure to stop turns a
// passing run into a failing one.
func (s *Shared) Main(m *testing.M) int {
	code := m.Run()
	if s.env != nil {
		if err := s.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: stopping the shared environment: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// prefixed returns err's message starting with the package's name once:
// most errors of the package carry the prefix already.
func prefixed(err error) string {
	const prefix = "testenv: "
	if msg := err.Error(); strings.HasPrefix(msg, prefix) {
		return msg
	}
	return prefix + err.Error()
}
