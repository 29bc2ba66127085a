package jvmtest

import (
	"fmt"
	"strings"
)

// CorpusCase is one bad or unsupported exporter config of the corpus of issue 22, and the reasons jmx-attach may
// refuse it with.
type CorpusCase struct {
	// Name says what is wrong with the config.
	Name string
	// Config is the config's bytes. Some are not valid UTF-8.
	Config []byte
	// Reasons are the jvm.Reason values (jmx-attach's reasons, "config-invalid") the case may be refused with.
	Reasons []string
}

// ReasonConfigInvalid is jvm.ReasonConfigInvalid, spelled out here because package jvm's own tests import this
// package.
const ReasonConfigInvalid = "config-invalid"

// CorpusConfigSizeLimit is jvm.MaxConfigSize (1 MiB), the largest config jmx-attach accepts, spelled out here for
// the same reason; the corpus's size case is one byte pattern over it.
const CorpusConfigSizeLimit = 1 << 20

// Corpus returns the bad and unsupported exporter configs that need nothing beside the config (no file, no busy
// port), in a fixed order: the four of issue 22 that made jmx_exporter 1.0.1 call System.exit, then regular
// expression, ObjectName, value type, agent-mode, authentication, TLS, size, YAML bomb, encoding and
// unsupported-section cases. Each must be refused with one of its Reasons, by the Go prefilter or by the agent,
// and harm no JVM. cmd/jmx-attach runs it through jmx-attach; test/e2e runs it through the operator. Each call
// returns fresh slices.
func Corpus() []CorpusCase {
	invalid := func(name, config string) CorpusCase {
		return CorpusCase{Name: name, Config: []byte(config), Reasons: []string{ReasonConfigInvalid}}
	}
	return []CorpusCase{
		// The four: each passed the old prefilter and made jmx_exporter 1.0.1 call System.exit.
		invalid("unclosed regex group", "rules:\n- pattern: \"java.lang<type=(Memory>\"\n"),
		invalid("Go-style named group", "rules:\n- pattern: \"java.lang<type=(?P<t>\\\\w+)>\"\n"),
		invalid("includeObjectNames without a key", "includeObjectNames: [\"java.lang\"]\n"),
		invalid("basic auth without a password", "httpServer:\n  authentication:\n    basic:\n      username: prometheus\n"),
		// Regular expressions.
		invalid("trailing backslash", "rules:\n- pattern: 'java.lang\\'\n"),
		invalid("unclosed character class", "rules:\n- pattern: \"[a-\"\n"),
		invalid("dangling quantifier", "rules:\n- pattern: \"*Memory\"\n"),
		invalid("inverted repetition range", "rules:\n- pattern: \"a{2,1}\"\n"),
		// ObjectName patterns.
		invalid("ObjectName with a trailing comma", "excludeObjectNames: [\"java.lang:type=Memory,\"]\n"),
		invalid("ObjectName with a key twice", "includeObjectNames: [\"java.lang:type=Memory,type=Runtime\"]\n"),
		invalid("ObjectName key without a value", "includeObjectNames: [\"java.lang:type\"]\n"),
		// Value types.
		invalid("boolean as a sentence", "lowercaseOutputName: \"true please\"\n"),
		invalid("negative start delay", "startDelaySeconds: -5\n"),
		invalid("rules as a mapping", "rules:\n  pattern: x\n"),
		invalid("valueFactor not a number", "rules:\n- pattern: \".*\"\n  name: x\n  valueFactor: abc\n"),
		invalid("labels as a list", "rules:\n- pattern: \".*\"\n  name: x\n  labels: [a, b]\n"),
		invalid("name without a pattern", "rules:\n- name: x\n"),
		// Settings of the standalone exporter, refused in an agent.
		invalid("hostPort in an agent", "hostPort: 127.0.0.1:9999\n"),
		invalid("jmxUrl in an agent", "jmxUrl: service:jmx:rmi:///jndi/rmi://127.0.0.1:9999/jmxrmi\n"),
		// Authentication.
		invalid("SHA-256 without a hash", "httpServer:\n  authentication:\n    basic:\n      username: u\n      algorithm: SHA-256\n      salt: s\n"),
		invalid("unknown algorithm", "httpServer:\n  authentication:\n    basic:\n      username: u\n      algorithm: MD4\n      passwordHash: ab\n"),
		invalid("blank username", "httpServer:\n  authentication:\n    basic:\n      username: \"  \"\n      password: p\n"),
		invalid("authenticator plugin that does not exist", "httpServer:\n  authentication:\n    plugin:\n      class: com.example.NoSuchAuthenticator\n"),
		// TLS.
		invalid("missing key store", "httpServer:\n  ssl:\n    keyStore:\n      filename: /nonexistent/keystore.p12\n      password: secret\n    certificate:\n      alias: localhost\n"),
		// Size.
		invalid("over 1 MiB", "rules:\n- pattern: \".*\"\n#"+strings.Repeat("x", CorpusConfigSizeLimit)+"\n"),
		// A YAML bomb.
		invalid("billion laughs", billionLaughs()),
		// Encoding.
		invalid("invalid UTF-8", "rules:\n- pattern: \".*\"\n# \xff\xfe\xfd\n"),
		invalid("UTF-32 byte order mark", "\x00\x00\xfe\xffrules: []\n"),
		invalid("byte order mark inside a key", "rules: []\n\xef\xbb\xbflowercaseOutputName: true\n"),
		invalid("NUL byte", "rules:\n- pattern: \".*\"\x00\n"),
		// Unsupported sections.
		invalid("openTelemetry", "openTelemetry:\n  endpoint: http://127.0.0.1:4317\n"),
		invalid("metricCustomizers without mbeanFilter", "metricCustomizers:\n- attributesAsLabels: [a]\n"),
	}
}

// billionLaughs is a YAML bomb: nine levels of nine aliases each, 9^9 strings once expanded, inside the
// httpServer section, which the prefilter leaves to the agent.
func billionLaughs() string {
	var b strings.Builder
	b.WriteString("rules:\n- pattern: \".*\"\nhttpServer:\n  a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	prev := "a"
	for _, c := range "bcdefghi" {
		fmt.Fprintf(&b, "  %c: &%c [%s*%s]\n", c, c, strings.Repeat("*"+prev+",", 8), prev)
		prev = string(c)
	}
	return b.String()
}
