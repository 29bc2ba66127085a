package operator

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEndedSoonAfterStart: a container start that ended within the window
// of its start, or before it could start, not on SIGTERM and not with exit
// 0, is a death; the current state is looked at before the last one, and
// previous says which.
func TestEndedSoonAfterStart(t *testing.T) {
	now := time.Now()
	ended := func(code int32, signal int32, ranFor time.Duration) *corev1.ContainerStateTerminated {
		return &corev1.ContainerStateTerminated{ExitCode: code, Signal: signal, ContainerID: "containerd://x",
			StartedAt: metav1.NewTime(now.Add(-ranFor)), FinishedAt: metav1.NewTime(now)}
	}
	neverStarted := &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError", FinishedAt: metav1.NewTime(now)}
	for _, tc := range []struct {
		name           string
		state, last    *corev1.ContainerStateTerminated
		death, previou bool
	}{
		{"running, never ended", nil, nil, false, false},
		{"exit 1 at once, restarted", nil, ended(1, 0, time.Second), true, true},
		{"exit 1 at once, not restarted yet", ended(1, 0, time.Second), nil, true, false},
		{"killed by the OOM killer within the window", nil, ended(137, 9, 20*time.Second), true, true},
		{"ended after the window", nil, ended(1, 0, 2*time.Minute), false, false},
		{"exit 0: finished its work", nil, ended(0, 0, time.Second), false, false},
		{"SIGTERM: stopped on request", nil, ended(143, 0, time.Second), false, false},
		{"signal 15", nil, ended(1, 15, time.Second), false, false},
		{"could not start", neverStarted, nil, true, false},
		{"the current start is clean, the last one died", ended(0, 0, time.Second), ended(1, 0, time.Second), true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := corev1.ContainerStatus{Name: "app"}
			if tc.state != nil {
				cs.State.Terminated = tc.state
			} else {
				cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now)}
			}
			cs.LastTerminationState.Terminated = tc.last
			got, previous := endedSoonAfterStart(cs, time.Minute)
			if (got != nil) != tc.death || got != nil && previous != tc.previou {
				t.Errorf("got %+v previous %v, want death %v previous %v", got, previous, tc.death, tc.previou)
			}
		})
	}
}

// TestOneLineMakesUntrustedOutputPrintable: a JVM's output becomes one
// line of printable text, whatever bytes it holds.
func TestOneLineMakesUntrustedOutputPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"Error occurred during initialization of boot layer\njava.lang.module.FindException: Module java.instrument not found\n": "Error occurred during initialization of boot layer | java.lang.module.FindException: Module java.instrument not found",
		"a\r\nb":                    "a | b",
		"\x1b[31mred\x1b[0m":        "?[31mred?[0m",
		"nul\x00byte\xff\xfe":       "nul?byte??",
		"   ":                       "",
		"tab\there":                 "tab?here",
		"ünïcödé stays":             "ünïcödé stays",
		strings.Repeat("x", 10):     strings.Repeat("x", 10),
		"line\u2028separator\u0085": "line?separator",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
}
