package jvm

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

func longResults(n, msgLen int) []InjectResult {
	out := make([]InjectResult, n)
	for i := range out {
		out[i] = InjectResult{PID: 1000 + i, NSPID: 1, MainClass: "com.example.Service" + fmt.Sprint(i), Status: OutcomeError,
			Reason: ReasonPortInUse, Message: fmt.Sprintf("result %d: %s", i, strings.Repeat("é port held by a listener ", msgLen/26)),
			Port: 9404 + i, AgentPath: "/tmp/handlerkit-jmx-0123456789abcdef/agent.jar", ConfigPath: "/tmp/handlerkit-jmx-0123456789abcdef/config.yaml",
			JavaVersion: "17.0.15", StartedAt: time.Date(2026, 5, 4, 10, 11, 12, 340_000_000, time.UTC)}
	}
	return out
}

func TestTerminationLogOfManyLongResultsFitsAndParsesBack(t *testing.T) {
	results := longResults(40, 600)
	data := FormatTerminationLog(results)
	if len(data) > MaxTerminationLog {
		t.Fatalf("termination log is %d bytes, more than %d", len(data), MaxTerminationLog)
	}
	got, err := ParseTerminationLog(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	last := got[len(got)-1]
	kept := got
	if last.Reason == ReasonTruncated {
		kept = got[:len(got)-1]
		want := fmt.Sprintf("%d of 40 results left out", 40-len(kept))
		if last.Status != OutcomeError || last.PID != 0 || !strings.Contains(last.Message, want) {
			t.Fatalf("summary %+v, want it to say %q", last, want)
		}
	} else if len(got) != 40 {
		t.Fatalf("%d results without a summary, want 40", len(got))
	}
	if len(kept) < 20 {
		t.Fatalf("only %d results kept in %d bytes", len(kept), len(data))
	}
	for i, r := range kept {
		w := results[i]
		if r.AgentPath != "" || r.ConfigPath != "" {
			t.Errorf("result %d keeps its paths: %+v", i, r)
		}
		if r.PID != w.PID || r.Status != w.Status || r.Reason != w.Reason || r.Port != w.Port || !r.StartedAt.Equal(w.StartedAt) {
			t.Errorf("result %d = %+v, want %+v", i, r, w)
		}
		if !strings.HasPrefix(w.Message, strings.TrimSuffix(r.Message, truncationMark)) {
			t.Errorf("message %d %q is not a prefix of %q", i, r.Message, w.Message)
		}
	}
	// Evenly: every shortened message has the same length budget, so lengths differ by at most a character.
	if len(kept) > 1 && len(kept[0].Message) != len(kept[1].Message) && abs(len(kept[0].Message)-len(kept[1].Message)) > 2 {
		t.Errorf("messages shortened unevenly: %d and %d bytes", len(kept[0].Message), len(kept[1].Message))
	}
	t.Logf("%d bytes, %d lines", len(data), bytes.Count(data, []byte("\n")))
}

func TestTerminationLogShortensMessagesEvenlyBeforeDroppingResults(t *testing.T) {
	results := longResults(12, 2000)
	data := FormatTerminationLog(results)
	got, err := ParseTerminationLog(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > MaxTerminationLog || len(got) != 12 {
		t.Fatalf("%d bytes, %d results; want every one of 12 within %d bytes", len(data), len(got), MaxTerminationLog)
	}
	for _, r := range got {
		if !strings.HasSuffix(r.Message, truncationMark) || len(r.Message) < 100 {
			t.Errorf("message not shortened evenly: %d bytes %q", len(r.Message), r.Message)
		}
	}
}

func TestTerminationLogKeepsShortResultsWhole(t *testing.T) {
	results := longResults(3, 52)
	got, err := ParseTerminationLog(FormatTerminationLog(results))
	if err != nil {
		t.Fatal(err)
	}
	for i := range results {
		results[i].AgentPath, results[i].ConfigPath = "", ""
		if got[i] != results[i] {
			t.Errorf("result %d = %+v, want %+v", i, got[i], results[i])
		}
	}
	if out := FormatTerminationLog(nil); len(out) != 0 {
		t.Errorf("no results: %q", out)
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// TestTerminationLogShortensLongNotes: a note (from the agent's status, up to 16 KiB) is shortened like the
// message, so that every result still fits.
func TestTerminationLogShortensLongNotes(t *testing.T) {
	results := longResults(10, 100)
	for i := range results {
		results[i].Status, results[i].Reason = OutcomeOK, ""
		results[i].Note = strings.Repeat("the httpServer section changed; ", 400)
	}
	data := FormatTerminationLog(results)
	got, err := ParseTerminationLog(data)
	if err != nil || len(data) > MaxTerminationLog {
		t.Fatalf("%d bytes: %v", len(data), err)
	}
	if len(got) != 10 {
		t.Fatalf("%d results kept, want all 10", len(got))
	}
	for i, r := range got {
		if !strings.HasSuffix(r.Note, truncationMark) || !strings.HasPrefix(results[i].Note, strings.TrimSuffix(r.Note, truncationMark)) {
			t.Fatalf("note %d: %q", i, r.Note)
		}
	}
}
