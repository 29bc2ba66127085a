package testenv

import (
	"fmt"

	"github.com/handlerkit/handlerkit/pkg/testenv/freeport"
)

// freePort returns a loopback TCP port nobody listens on right now, outside
// the ephemeral range and not given to another environment of this process.
func freePort() (int, error) {
	p, err := freeport.Loopback()
	if err != nil {
		return 0, fmt.Errorf("testenv: %w", err)
	}
	return p, nil
}

// releasePorts makes ports available to later environments of this process.
func releasePorts(ports ...int) { freeport.Release(ports...) }
