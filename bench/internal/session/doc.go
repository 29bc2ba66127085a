// Package session runs one contender in a process of its own, so that its
// heap, RSS and requests are its own, and talks to it over a pipe: the
// child writes one JSON Message per line on stdout; the parent writes
// commands on the child's stdin ("mark NAME") and closes it to stop the
// child. A child whose parent dies sees its stdin close and stops too.
package session
