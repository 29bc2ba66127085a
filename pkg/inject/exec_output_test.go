package inject

import (
	"context"
	"io"
	"strings"
	"testing"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/jvm"
)

// endless prints "y\n" for ever, as a shell that prints without end does,
// until its context ends.
type endless struct{ ctx context.Context }

func (e endless) Read(p []byte) (int, error) {
	if e.ctx.Err() != nil {
		return 0, io.EOF
	}
	for i := range p {
		p[i] = "y\n"[i%2]
	}
	return len(p), nil
}

// TestExecOutputIsBoundedAndStopsTheExec: what a target prints without end
// is kept up to MaxExecOutput bytes, the first write past it stops the exec
// (the stream copy ends with its context), and the outcome is
// ReasonOutputTooLarge with one printable line of detail.
func TestExecOutputIsBoundedAndStopsTheExec(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	stdout, stderr := &limitedBuffer{limit: MaxExecOutput, stop: stop}, &limitedBuffer{limit: MaxExecOutput, stop: stop}
	n, err := io.Copy(stdout, endless{ctx})
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() == nil {
		t.Fatal("the exec was not stopped")
	}
	if got := len(stdout.Bytes()); got != MaxExecOutput {
		t.Errorf("kept %d bytes, want %d", got, MaxExecOutput)
	}
	if over, total := stdout.over(); !over || total != n {
		t.Errorf("over %v, counted %d of %d", over, total, n)
	}
	// More writes after the stop are counted, not kept, and never fail.
	if m, err := stdout.Write(make([]byte, 1<<20)); m != 1<<20 || err != nil || len(stdout.Bytes()) != MaxExecOutput {
		t.Errorf("write after the bound: %d, %v, %d kept", m, err, len(stdout.Bytes()))
	}

	target := Target{Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}, Container: "app"}
	o := tooMuchOutput(target, stdout, stderr)
	if o == nil || o.Refused != ReasonOutputTooLarge {
		t.Fatalf("outcome %+v, want %s", o, ReasonOutputTooLarge)
	}
	for _, w := range []string{"container app", "stdout", "262144 bytes", "EphemeralContainer", `"y y y`} {
		if !strings.Contains(o.Detail, w) {
			t.Errorf("detail %q lacks %q", o.Detail, w)
		}
	}
	if strings.ContainsAny(o.Detail, "\n\r") || len(o.Detail) > 1024 {
		t.Errorf("detail is not one short line: %q", o.Detail)
	}

	// Within the bound: nothing is stopped, everything is kept.
	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	small := &limitedBuffer{limit: MaxExecOutput, stop: stop2}
	if _, err := io.Copy(small, strings.NewReader(strings.Repeat("x", MaxExecOutput))); err != nil {
		t.Fatal(err)
	}
	if ctx2.Err() != nil || len(small.Bytes()) != MaxExecOutput || tooMuchOutput(target, small, &limitedBuffer{limit: MaxExecOutput}) != nil {
		t.Errorf("output of exactly the bound was refused")
	}
}

// TestExecOutputIsParsedAsUntrusted: the texts of jmx-attach's results, which
// ran in the target's container, become one printable line of bounded
// length, and a reason that is not jmx-attach's word becomes internal.
func TestExecOutputIsParsedAsUntrusted(t *testing.T) {
	line := `{"pid":7,"nspid":1,"mainClass":"app\u001b[31m.Main\nFAKE","status":"error","reason":"Evil\nReason",` +
		`"message":"` + strings.Repeat("m", 5000) + `\r\nInjected","port":9404}`
	o, err := parseOutcome([]byte(line+"\nnoise\x00\x07 here\n"), 1)
	if err != nil {
		t.Fatal(err)
	}
	o = untrusted(o)
	if len(o.Results) != 1 {
		t.Fatalf("results %+v", o.Results)
	}
	r := o.Results[0]
	for name, s := range map[string]string{"mainClass": r.MainClass, "message": r.Message, "detail": o.Detail} {
		for _, c := range s {
			if !unicode.IsPrint(c) {
				t.Errorf("%s %q holds %U", name, s, c)
			}
		}
	}
	if len(r.Message) > 1024+len("…") || len(r.MainClass) > 256+len("…") {
		t.Errorf("message of %d bytes, main class of %d", len(r.Message), len(r.MainClass))
	}
	if r.Reason != jvm.ReasonInternal || !strings.Contains(r.Message, `unknown reason "Evil Reason"`) {
		t.Errorf("reason %q, message %.100q", r.Reason, r.Message)
	}
	if got := oneLine("a\nb\tc\x00d\xffe", 100); got != "a b c\uFFFDd\uFFFDe" {
		t.Errorf("oneLine: %q", got)
	}
	if got := oneLine(strings.Repeat("é", 100), 11); got != strings.Repeat("é", 6)+"…" {
		t.Errorf("oneLine cut: %q", got)
	}
	good := jvm.InjectResult{PID: 7, Status: jvm.OutcomeError, Reason: jvm.ReasonPortInUse, Message: "taken"}
	if u := untrusted(Outcome{Results: []jvm.InjectResult{good}}); u.Results[0] != good {
		t.Errorf("a result of jmx-attach's own words changed: %+v", u.Results[0])
	}
}
