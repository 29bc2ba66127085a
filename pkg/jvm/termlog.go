package jvm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// MaxTerminationLog is the size of a container's termination message that Kubernetes keeps; the rest is cut
// off.
const MaxTerminationLog = 4096

// truncationMark ends a message that FormatTerminationLog shortened.
const truncationMark = "..."

// FormatTerminationLog encodes results as JSON lines (the form of InjectResult.MarshalLine) that fit, together,
// in MaxTerminationLog bytes, so that Kubernetes keeps every line of them. The lines leave out AgentPath and
// ConfigPath, which the marker in the JVM's filesystem keeps. When the lines do not fit, the messages (and
// notes) are shortened, all to the same longest length that fits (so that every result keeps as much of its message as
// every other), and a shortened message ends with "...". When even results without messages do not fit, only
// the first results are written (as many as fit) and the last line is a summary: status error, reason
// ReasonTruncated, pid 0, and a message saying how many results were left out. ParseTerminationLog reads it
// back.
func FormatTerminationLog(results []InjectResult) []byte {
	compact := make([]InjectResult, len(results))
	longest := 0
	for i, r := range results {
		r.AgentPath, r.ConfigPath = "", ""
		compact[i] = r
		longest = max(longest, len(r.Message), len(r.Note))
	}
	// Keep as many results as fit with their messages left out entirely, then give them the longest messages
	// that still fit.
	kept := len(compact)
	for kept > 0 && encodeTerminationLog(compact, kept, 0) == nil {
		kept--
	}
	lo, hi := 0, longest
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if encodeTerminationLog(compact, kept, mid) != nil {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return encodeTerminationLog(compact, kept, lo)
}

// encodeTerminationLog encodes the first kept results with messages cut to limit bytes, plus a summary line
// when results were left out; it returns nil when that is more than MaxTerminationLog bytes.
func encodeTerminationLog(results []InjectResult, kept, limit int) []byte {
	var b bytes.Buffer
	add := func(r InjectResult) bool {
		line, err := json.Marshal(r)
		if err != nil || b.Len()+len(line)+1 > MaxTerminationLog {
			return false
		}
		b.Write(line)
		b.WriteByte('\n')
		return true
	}
	for _, r := range results[:kept] {
		r.Message, r.Note = shorten(r.Message, limit), shorten(r.Note, limit)
		if !add(r) {
			return nil
		}
	}
	if left := len(results) - kept; left > 0 {
		summary := InjectResult{Status: OutcomeError, Reason: ReasonTruncated,
			Message: fmt.Sprintf("%d of %d results left out: the termination log holds %d bytes", left, len(results), MaxTerminationLog)}
		if !add(summary) {
			return nil
		}
	}
	return b.Bytes()
}

// shorten cuts s to at most limit bytes, at a character boundary, ending it with truncationMark when it was cut.
func shorten(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	if limit <= len(truncationMark) {
		return ""
	}
	cut := limit - len(truncationMark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + truncationMark
}

// ParseTerminationLog reads the lines FormatTerminationLog (or jmx-attach's --termination-log) wrote, each with
// ParseInjectResult; blank lines are skipped. A summary line (ReasonTruncated) is returned like any result.
func ParseTerminationLog(data []byte) ([]InjectResult, error) {
	var out []InjectResult
	for n, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		r, err := ParseInjectResult(line)
		if err != nil {
			return nil, fmt.Errorf("termination log line %d: %w", n+1, err)
		}
		out = append(out, r)
	}
	return out, nil
}
