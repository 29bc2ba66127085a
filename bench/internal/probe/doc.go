// Package probe measures a contender from the inside: which objects its
// handler has seen and finished (Recorder), the requests its clients send
// (Requests) and the memory its process holds (ReadMemory). Every contender
// process has one of each, so the figures belong to one contender only.
package probe
