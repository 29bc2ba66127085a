package operator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestRepeatsPreviousStart: a restarted container's new record repeats its
// previous start only when that start had the agent, under the same
// generation and config, in the same JVMs on the same ports, without a
// note; anything else is news worth an Event.
func TestRepeatsPreviousStart(t *testing.T) {
	jvms := func(ports ...int32) []JVMRecord {
		var out []JVMRecord
		for _, p := range ports {
			out = append(out, JVMRecord{PID: 1, Main: "app.Main", Port: p})
		}
		return out
	}
	prev := ContainerRecord{ContainerID: "containerd://1", ConfigHash: "abc", Generation: 2, JVMs: jvms(9404)}
	next := ContainerRecord{ContainerID: "containerd://2", ConfigHash: "abc", Generation: 2, JVMs: jvms(9404)}
	restarted := corev1.ContainerStatus{Name: "app", ContainerID: "containerd://2", RestartCount: 1}
	for _, tc := range []struct {
		name   string
		cs     func(*corev1.ContainerStatus)
		t      func(*task)
		c      func(*ContainerRecord)
		repeat bool
	}{
		{name: "the same agent again", repeat: true},
		{name: "a first start", cs: func(cs *corev1.ContainerStatus) { cs.RestartCount = 0 }},
		{name: "no earlier record", t: func(t *task) { t.earlier = ContainerRecord{} }},
		{name: "the record is of this start", t: func(t *task) { t.earlier.ContainerID = "containerd://2" }},
		{name: "the previous start had no JVM", t: func(t *task) { t.earlier.JVMs, t.earlier.NoJVM = nil, true }},
		{name: "the previous start failed", t: func(t *task) {
			t.earlier.JVMs, t.earlier.Failure = nil, &Failure{Reason: "AttachRefused"}
		}},
		{name: "the previous start kept an earlier config", t: func(t *task) { t.earlier.Rejected = &Rejection{ConfigHash: "abc"} }},
		{name: "another generation", t: func(t *task) { t.earlier.Generation = 1 }},
		{name: "another config", t: func(t *task) { t.earlier.ConfigHash = "def" }},
		{name: "another port", c: func(c *ContainerRecord) { c.JVMs = jvms(9405) }},
		{name: "one more JVM", c: func(c *ContainerRecord) { c.JVMs = jvms(9404, 9405) }},
		{name: "another main class", c: func(c *ContainerRecord) { c.JVMs[0].Main = "other.Main" }},
		{name: "a note now", c: func(c *ContainerRecord) { c.Note = "the JVM runs with -XX:+DisableAttachMechanism" }},
		{name: "a note before", t: func(t *task) { t.earlier.Note = "a note" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := restarted
			tk := task{container: cs, earlier: prev}
			tk.earlier.JVMs = jvms(9404)
			c := next
			c.JVMs = jvms(9404)
			if tc.cs != nil {
				tc.cs(&cs)
			}
			if tc.t != nil {
				tc.t(&tk)
			}
			if tc.c != nil {
				tc.c(&c)
			}
			if got := repeatsPreviousStart(cs, tk, c); got != tc.repeat {
				t.Errorf("repeatsPreviousStart = %v, want %v", got, tc.repeat)
			}
		})
	}
}
