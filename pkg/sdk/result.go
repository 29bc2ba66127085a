package sdk

import (
	"errors"
	"fmt"
	"time"
)

// ErrLeadershipLost is returned (wrapped) by Run when the Elector's context
// ends while Run's own context is still alive. The process should usually
// exit so that a fresh replica can stand for election.
var ErrLeadershipLost = errors.New("leadership lost")

// requeueAfter is the value behind RequeueAfter.
type requeueAfter struct{ after time.Duration }

// Error implements error.
func (r *requeueAfter) Error() string { return fmt.Sprintf("requeue after %s", r.after) }

// RequeueAfter returns an error value that asks for the key to be handled
// again after d. It is not counted as a failure (not as an error, and not
// towards WithMaxRetries), and a positive d resets the key's backoff. A d
// <= 0 asks for "as soon as allowed": the key goes through the watch's rate
// limiter like a failed key, and its backoff keeps growing while the
// handler keeps asking, so a handler that always requeues does not spin.
func RequeueAfter(d time.Duration) error { return &requeueAfter{after: d} }

// terminal is the value behind Terminal.
type terminal struct{ err error }

// Error implements error.
func (t *terminal) Error() string { return "terminal: " + t.err.Error() }

// Unwrap returns the wrapped error, for errors.Is and errors.As.
func (t *terminal) Unwrap() error { return t.err }

// Terminal wraps err so that the handler's failure is recorded and logged
// but the key is not retried. Terminal(nil) is nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &terminal{err: err}
}

// IsTerminal reports whether err, or an error it wraps, came from Terminal.
func IsTerminal(err error) bool {
	var t *terminal
	return errors.As(err, &t)
}

func asRequeue(err error, target **requeueAfter) bool { return errors.As(err, target) }
