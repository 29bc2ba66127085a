package operator

import (
	"strings"
	"testing"
	"unicode/utf8"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

// picked is the line every JVM prints before the agent's, on stderr.
const picked = "Picked up JAVA_TOOL_OPTIONS: -javaagent:/handlerkit/jmx-agent/opt/handlerkit/jmx-agent.jar=9404:env:HANDLERKIT_JMX_CONFIG\n"

// TestParseAgentLineTakesOnlyTheAgentsOwnLine: the start of a container's
// log is untrusted data; only a whole line that starts with the agent's
// prefix and says serving or refused with a reason counts, the first one
// that is not a JDK tool's, and its message comes back clean and bounded.
func TestParseAgentLineTakesOnlyTheAgentsOwnLine(t *testing.T) {
	long := strings.Repeat("x", 3000)
	for _, tc := range []struct {
		name string
		log  string
		want *agentLine
	}{
		{"empty", "", nil},
		{"no line: the JVM has not got there yet", picked, nil},
		{"serving", picked + "handlerkit-jmx-agent: serving on :9404 (config sha256 3f9c0a5e1b2d)\napp started\n",
			&agentLine{serving: true, message: "serving on :9404 (config sha256 3f9c0a5e1b2d)"}},
		{"refused", picked + "handlerkit-jmx-agent: refused: config-invalid: Unknown inline modifier near index 23\n",
			&agentLine{reason: "config-invalid", message: "Unknown inline modifier near index 23"}},
		{"refused without a message", "handlerkit-jmx-agent: refused: internal\n", &agentLine{reason: "internal"}},
		{"CRLF (a container with a tty)", strings.ReplaceAll(picked, "\n", "\r\n") + "handlerkit-jmx-agent: refused: port-in-use: cannot bind :9404: Address already in use\r\n",
			&agentLine{reason: "port-in-use", message: "cannot bind :9404: Address already in use"}},
		{"a line not ended: cut by the limit or being written", picked + "handlerkit-jmx-agent: serving on :9404", nil},
		{"two lines: the first counts", "handlerkit-jmx-agent: refused: config-invalid: bad\nhandlerkit-jmx-agent: serving on :9404 (x)\n",
			&agentLine{reason: "config-invalid", message: "bad"}},
		{"two lines, the first serving", "handlerkit-jmx-agent: serving on :9404 (x)\nhandlerkit-jmx-agent: refused: port-in-use: second JVM\n",
			&agentLine{serving: true, message: "serving on :9404 (x)"}},
		{"a JDK tool's refusal is not the application's", "handlerkit-jmx-agent: refused: jdk-tool: sun.tools.jps.Jps is a JDK tool\n" +
			picked + "handlerkit-jmx-agent: serving on :9404 (x)\n", &agentLine{serving: true, message: "serving on :9404 (x)"}},
		{"the prefix in the middle of a line", "2026-11-29 INFO handlerkit-jmx-agent: serving on :9404 (x)\n", nil},
		{"the prefix after white space", " handlerkit-jmx-agent: serving on :9404 (x)\n", nil},
		{"an unknown state", "handlerkit-jmx-agent: starting\nhandlerkit-jmx-agent: refused\n", nil},
		{"a reason that is not a word", "handlerkit-jmx-agent: refused: Config Invalid: x\nhandlerkit-jmx-agent: refused: -x: y\n" +
			"handlerkit-jmx-agent: refused: " + strings.Repeat("a", 41) + ": z\n", nil},
		{"an overlong line", "handlerkit-jmx-agent: refused: config-invalid: " + strings.Repeat("y", maxAgentLine) + "\n", nil},
		{"binary junk", "\x00\xff\xfe\x1b[31m\n\x00handlerkit-jmx-agent: serving on :1\n\xff\xfe", nil},
		{"junk around the line", "\x00\xff\n\x1b[2Jhello\nhandlerkit-jmx-agent: refused: config-invalid: a\x00b\x1b[31mc\xffd\n\xff\xfe",
			&agentLine{reason: "config-invalid", message: "a b [31mc\uFFFDd"}},
		{"a long message is cut", "handlerkit-jmx-agent: refused: config-invalid: " + long + "\n",
			&agentLine{reason: "config-invalid", message: long[:maxAgentMessage] + "…"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseAgentLine([]byte(tc.log))
			if tc.want == nil {
				if ok {
					t.Errorf("found %+v, want no line", got)
				}
				return
			}
			if !ok || got != *tc.want {
				t.Errorf("got %+v (found %v), want %+v", got, ok, *tc.want)
			}
		})
	}
}

// TestParseAgentLineCutsAMessageAtACharacter: a message cut to its bound
// stays valid UTF-8.
func TestParseAgentLineCutsAMessageAtACharacter(t *testing.T) {
	msg := strings.Repeat("é", 1500) // 3,000 bytes
	got, ok := parseAgentLine([]byte("handlerkit-jmx-agent: refused: config-invalid: " + msg + "\n"))
	if !ok || !utf8.ValidString(got.message) || len(got.message) > maxAgentMessage+len("…") || !strings.HasSuffix(got.message, "é…") {
		t.Errorf("message of %d bytes (valid %v): %q...", len(got.message), utf8.ValidString(got.message), got.message[:20])
	}
}

// FuzzParseAgentLine: no input makes the parser fail, and what it returns
// is bounded and clean.
func FuzzParseAgentLine(f *testing.F) {
	f.Add([]byte(picked + "handlerkit-jmx-agent: serving on :9404 (x)\n"))
	f.Add([]byte("handlerkit-jmx-agent: refused: config-invalid: x\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := parseAgentLine(b)
		if !ok {
			return
		}
		if !utf8.ValidString(got.message) || len(got.message) > maxAgentMessage+len("…") || strings.ContainsAny(got.message, "\n\r\x00") {
			t.Errorf("message %q", got.message)
		}
		if !got.serving && !agentReasonWord(got.reason) {
			t.Errorf("reason %q", got.reason)
		}
	})
}

// TestAgentVerdictsMapAsAttachMapsThem: a refusal at start has the reason
// the same refusal gets at attach, for the four reasons whose remedy is the
// same, AgentStartFailed for the others; the message is the agent's; a
// serving agent is the one JVM on the container's port.
func TestAgentVerdictsMapAsAttachMapsThem(t *testing.T) {
	want := ContainerRecord{ContainerID: "containerd://1", Port: 9404, ConfigHash: "3f9c0a5e1b2d4c68", InjectedBy: jmxv1alpha1.InjectedByAtStart}
	for reason, exp := range map[string]string{
		"config-invalid":        jmxv1alpha1.ReasonConfigInvalid,
		"port-in-use":           jmxv1alpha1.ReasonPortInUse,
		"jvm-unsupported":       jmxv1alpha1.ReasonJVMUnsupported,
		"agent-already-present": jmxv1alpha1.ReasonAgentAlreadyPresent,
		"port-not-permitted":    jmxv1alpha1.ReasonAgentStartFailed,
		"internal":              jmxv1alpha1.ReasonAgentStartFailed,
		"some-later-reason":     jmxv1alpha1.ReasonAgentStartFailed,
	} {
		c := verdictRecord(want, 9405, agentLine{reason: reason, message: "the agent's words"})
		if c.Failure == nil || c.Failure.Reason != exp || c.Failure.Message != "the agent's words" || len(c.JVMs) != 0 ||
			c.ConfigHash != want.ConfigHash || !c.atStart() || !atStartVerdict(c, want) {
			t.Errorf("%s: record %+v (failure %+v), want Failure %s with the agent's message", reason, c, c.Failure, exp)
		}
	}
	c := verdictRecord(want, 9405, agentLine{serving: true})
	if c.Failure != nil || len(c.JVMs) != 1 || c.JVMs[0].Port != 9405 || !atStartVerdict(c, want) {
		t.Errorf("serving: record %+v", c)
	}
	if atStartVerdict(want, want) {
		t.Error("a record without a verdict counts as one")
	}
}
