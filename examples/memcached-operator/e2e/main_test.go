// Package e2e tests the memcached example operator against a real local
// cluster (pkg/testenv with a node): real memcached servers in containers,
// the operator running in the test process under its deploy/rbac.yaml
// permissions.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// env is the cluster every test of the package shares, each in its own
// namespace: a node takes seconds to start, not milliseconds.
var env *testenv.Environment

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	start := time.Now()
	var err error
	// The CRD is installed before the controller-manager starts, so that
	// the garbage collector follows the Memcached owner references at once
	// (installed after Start, it waited up to 30 s for its next discovery).
	env, err = testenv.Start(ctx, testenv.WithNode(), testenv.WithCRDsFromDir("../deploy/crds"))
	if err != nil {
		// Without CI a machine that cannot run a node skips the package;
		// under CI=true that is a failure, like any other error.
		if errors.Is(err, testenv.ErrNodeUnsupported) && os.Getenv("CI") == "" {
			fmt.Fprintf(os.Stderr, "e2e: skipping (CI unset): %v\n", err)
			return 0
		}
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	defer func() {
		if env != nil {
			env.Stop()
		}
	}()
	fmt.Fprintf(os.Stderr, "e2e: cluster started in %s\n", time.Since(start).Round(time.Millisecond))

	// The memcached image, from Debian's package; `make images` leaves it
	// in the cache, where it is found instead of rebuilt.
	start = time.Now()
	cache, err := testimages.DefaultCacheDir()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	image, err := testimages.BuildMemcached(ctx, cache, cache)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building the memcached image: %v\n", err)
		return 1
	}
	if err := env.LoadImageArchive(ctx, image.File); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: image loaded in %s\n", time.Since(start).Round(time.Millisecond))

	code := m.Run()
	err = env.Stop()
	env = nil
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: stop: %v\n", err)
		code = 1
	}
	return code
}
