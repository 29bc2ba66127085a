package sdk

import (
	"os"
	"testing"

	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// One control plane serves every test of the package; each test uses its
// own namespace. It starts on first use so pure unit tests need no cluster.
var shared testenv.Shared

// SharedEnv returns the package's control plane, starting it on first use.
func SharedEnv(t testing.TB) *testenv.Environment {
	t.Helper()
	return shared.Get(t)
}

// TrackerSize reports how many keys of a watch hold pending or final state.
func (o *Operator) TrackerSize(watch string) (pending, final int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, w := range o.watches {
		if w.name == watch {
			if r := w.run(); r != nil {
				return r.tracker.size()
			}
		}
	}
	return 0, 0
}

func TestMain(m *testing.M) {
	os.Exit(shared.Main(m))
}
