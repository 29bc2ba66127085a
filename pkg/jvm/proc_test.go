package jvm

import (
	"bytes"
	"errors"
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

const statusJVMInContainer = `Name:	java
Umask:	0022
State:	S (sleeping)
Tgid:	4242
Ngid:	0
Pid:	4242
PPid:	4200
Uid:	1000	1001	1002	1003
Gid:	2000	2001	2002	2003
NStgid:	4242	7
NSpid:	4242	7
SigBlk:	0000000000000000
SigIgn:	0000000000000000
SigCgt:	2000000181005ccf
`

func TestParseStatusReadsIdsNamespacesAndSignals(t *testing.T) {
	s, err := ParseStatus([]byte(statusJVMInContainer))
	if err != nil {
		t.Fatal(err)
	}
	want := Status{Name: "java", PID: 4242, NSPIDs: []int{4242, 7}, UID: [4]int{1000, 1001, 1002, 1003},
		GID: [4]int{2000, 2001, 2002, 2003}, SigCgt: 0x2000000181005ccf}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
	if s.NSPID() != 7 {
		t.Errorf("NSPID = %d, want 7", s.NSPID())
	}
	if !s.CatchesSignal(3) {
		t.Errorf("SIGQUIT (bit 2 of 0x...ccf) should be caught")
	}
	if s.CatchesSignal(9) {
		t.Errorf("SIGKILL reported as caught")
	}
}

func TestParseStatusRejectsBrokenInput(t *testing.T) {
	cases := map[string]string{
		"empty":          "",
		"no uid":         "Pid:\t1\nGid:\t0 0 0 0\n",
		"short uid":      "Pid:\t1\nUid:\t0 0 0\nGid:\t0 0 0 0\n",
		"bad pid":        "Pid:\tx\nUid:\t0 0 0 0\nGid:\t0 0 0 0\n",
		"zero pid":       "Pid:\t0\nUid:\t0 0 0 0\nGid:\t0 0 0 0\n",
		"bad nstgid":     "Pid:\t1\nNStgid:\t1 x\nUid:\t0 0 0 0\nGid:\t0 0 0 0\n",
		"negative nspid": "Pid:\t1\nNStgid:\t1 -3\nUid:\t0 0 0 0\nGid:\t0 0 0 0\n",
		"bad sigcgt":     "Pid:\t1\nUid:\t0 0 0 0\nGid:\t0 0 0 0\nSigCgt:\tzz\n",
	}
	for name, in := range cases {
		if _, err := ParseStatus([]byte(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParseStatusWithoutNamespacedPidsFallsBackToPid(t *testing.T) {
	s, err := ParseStatus([]byte("Pid:\t12\nUid:\t0 0 0 0\nGid:\t0 0 0 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.NSPID() != 12 {
		t.Errorf("NSPID = %d, want 12", s.NSPID())
	}
}

func TestParseStatHandlesParenthesesInComm(t *testing.T) {
	line := "4242 (my (odd) java) S 4200 4242 4200 0 -1 4194560 1 0 0 0 5 3 0 0 20 0 20 0 987654 1000 100 18446744073709551615\n"
	st, err := ParseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.PID != 4242 || st.Comm != "my (odd) java" || st.State != 'S' || st.PPID != 4200 || st.StartTicks != 987654 {
		t.Fatalf("got %+v", st)
	}
	for _, bad := range []string{"", "1 (x S 1", "x (y) S 1 2", "1 (y) S 1 2 3", "1 (y) SS " + strings.Repeat("1 ", 20)} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q): no error", bad)
		}
	}
}

func TestParseStatReadsTheExitCodeOfAnEndedProcess(t *testing.T) {
	// A zombie's stat as Linux 6 writes it: 52 fields, exit_code last.
	fields := "S 1 1 1 0 -1 4194560 1 0 0 0 5 3 0 0 20 0 20 0 987654 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 "
	cases := map[string]struct {
		state    string
		exitCode int
		hint     string
	}{
		"exited 1":      {"Z", 256, "exit status 1"},
		"killed by 9":   {"Z", 9, "killed by signal 9 (killed)"},
		"still running": {"S", 0, ""},
	}
	for name, tc := range cases {
		line := "77 (java) " + tc.state + fields[1:] + strconv.Itoa(tc.exitCode) + "\n"
		st, err := ParseStat([]byte(line))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if st.ExitCode != tc.exitCode || st.ExitHint() != tc.hint {
			t.Errorf("%s: exit code %d hint %q, want %d %q", name, st.ExitCode, st.ExitHint(), tc.exitCode, tc.hint)
		}
	}
}

const netTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0
   1: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 12346 1 0000000000000000 20 4 30 10 -1
`

const netTCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:2382 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  65534        0 999 1 0000000000000000 100 0 0 10 0
`

func TestParseNetTCPDecodesAddressesAndStates(t *testing.T) {
	socks, err := ParseNetTCP([]byte(netTCP))
	if err != nil {
		t.Fatal(err)
	}
	if len(socks) != 2 {
		t.Fatalf("got %d sockets", len(socks))
	}
	if !socks[0].LocalIP.Equal(net.IPv4(127, 0, 0, 1)) || socks[0].LocalPort != 8080 || socks[0].State != TCPListen || socks[0].Inode != 12345 {
		t.Errorf("socket 0: %+v", socks[0])
	}
	if socks[1].RemotePort != 8080 || socks[1].State != 1 || socks[1].UID != 1000 {
		t.Errorf("socket 1: %+v", socks[1])
	}
	socks6, err := ParseNetTCP([]byte(netTCP6))
	if err != nil {
		t.Fatal(err)
	}
	if len(socks6) != 1 || !socks6[0].LocalIP.Equal(net.IPv6loopback) || socks6[0].LocalPort != 9090 || socks6[0].UID != 65534 {
		t.Errorf("tcp6: %+v", socks6)
	}
}

func TestParseNetTCPRejectsMalformedLines(t *testing.T) {
	for _, bad := range []string{
		"hdr\n 0: 0100007F 00000000:0000 0A 0 0 0 0 0 1 0\n",
		"hdr\n 0: 0100007G:1F90 00000000:0000 0A 0 0 0 0 0 1 0\n",
		"hdr\n 0: 0100007F:1F90 00000000:0000 0A 0 0 0\n",
		"hdr\n 0: 01007F:1F90 00000000:0000 0A 0 0 0 0 0 1 0\n",
		"hdr\n 0: 0100007F:1F90 00000000:0000 ZZ 0 0 0 0 0 1 0\n",
	} {
		if _, err := ParseNetTCP([]byte(bad)); err == nil {
			t.Errorf("ParseNetTCP(%q): no error", bad)
		}
	}
}

func TestMainClassFindsWhatTheLauncherRuns(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"java", "-Xmx1g", "-cp", "a.jar:b.jar", "com.example.Main", "--port", "1"}, "com.example.Main"},
		{[]string{"/usr/bin/java", "-jar", "app.jar", "arg"}, "app.jar"},
		{[]string{"java", "--module-path", "mods", "-m", "com.app/com.app.Main"}, "com.app/com.app.Main"},
		{[]string{"java", "--module=com.app/com.app.Main"}, "com.app/com.app.Main"},
		{[]string{"java", "-Dx=y", "-XX:+UseG1GC", "-classpath", "x", "Main"}, "Main"},
		{[]string{"java", "@argfile"}, ""},
		{[]string{"java", "-version"}, ""},
		{[]string{"java", "-jar"}, ""},
		{nil, ""},
	}
	for _, tc := range cases {
		if got := MainClass(tc.args); got != tc.want {
			t.Errorf("MainClass(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestParseCmdlineSplitsOnNul(t *testing.T) {
	got := ParseCmdline([]byte("java\x00-cp\x00a b\x00Main\x00"))
	if want := []string{"java", "-cp", "a b", "Main"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := ParseCmdline(nil); got != nil {
		t.Errorf("empty cmdline: %q", got)
	}
}

func TestVMFlagLastSettingWins(t *testing.T) {
	if v, set := vmFlag([]string{"-XX:+DisableAttachMechanism", "-XX:-DisableAttachMechanism"}, "DisableAttachMechanism"); v || !set {
		t.Errorf("got %v %v, want false true", v, set)
	}
	if v, _ := vmFlag([]string{"-XX:+DisableAttachMechanismX"}, "DisableAttachMechanism"); v {
		t.Errorf("prefix match counted")
	}
}

func TestParseReleaseVersion(t *testing.T) {
	data := []byte("IMPLEMENTOR=\"Eclipse Adoptium\"\nJAVA_VERSION=\"21.0.2\"\nJAVA_VERSION_DATE=\"2024-01-16\"\n")
	if v := parseReleaseVersion(data); v != "21.0.2" {
		t.Errorf("got %q", v)
	}
}

func TestEncodeRequestSendsVersionCommandAndExactlyThreeArgs(t *testing.T) {
	got, err := encodeRequest("load", "instrument", "false", "/a.jar=1:/c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte("1\x00load\x00instrument\x00false\x00/a.jar=1:/c.yaml\x00"); !bytes.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	got, err = encodeRequest("properties")
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte("1\x00properties\x00\x00\x00\x00"); !bytes.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := encodeRequest("load", "a", "b", strings.Repeat("x", MaxArgLength+1)); ReasonOf(err) != ReasonArgsTooLong {
		t.Errorf("over-long argument: %v", err)
	}
	if _, err := encodeRequest("load", "a", "b", strings.Repeat("x", MaxArgLength)); err != nil {
		t.Errorf("argument of exactly %d bytes: %v", MaxArgLength, err)
	}
	if _, err := encodeRequest("load", "a\x00b"); err == nil {
		t.Errorf("NUL in argument accepted")
	}
	if _, err := encodeRequest("load", "a", "b", "c", "d"); err == nil {
		t.Errorf("four arguments accepted")
	}
}

func TestParseReplyRecognisesEachJDKFormat(t *testing.T) {
	cases := []struct {
		name       string
		reply      string
		format     ReplyFormat
		wantReason Reason
		wantRC     int
	}{
		{"jdk8 ok", "0\n0\n", ReplyJDK8, "", 0},
		{"jdk8 bad jar", "0\n100\n", ReplyJDK8, ReasonAgentJarInvalid, 100},
		{"jdk8 start failed", "0\n102\n", ReplyJDK8, ReasonAgentStartFailed, 102},
		{"jdk9 ok", "0\nreturn code: 0\n", ReplyJDK9, "", 0},
		{"jdk17 start failed", "0\nreturn code: 102\n", ReplyJDK9, ReasonAgentStartFailed, 102},
		{"jdk9 not on class path", "0\nreturn code: 101\n", ReplyJDK9, ReasonAgentLoadFailed, 101},
		{"jdk9 enomem", "0\nreturn code: -4\n", ReplyJDK9, ReasonAgentLoadFailed, -4},
		{"jdk9 unknown rc", "0\nreturn code: 7\n", ReplyJDK9, ReasonAgentLoadFailed, 7},
		{"jdk9 library not loaded", "0\ninstrument was not loaded.\nlibinstrument.so: cannot open\n", ReplyJDK9, ReasonAgentLoadFailed, 0},
		{"jdk21 failed", "-1\nFailed to load agent library: instrument was not loaded\n", ReplyFailed, ReasonAgentLoadFailed, 0},
		{"protocol mismatch", "101\n", ReplyFailed, ReasonAgentLoadFailed, 0},
		// Recorded from JDK 17.0.15 and Temurin 25.0.3 started with -XX:-EnableDynamicAgentLoading.
		{"jdk17 dynamic loading disabled", "-1\nDynamic agent loading is not enabled. Use -XX:+EnableDynamicAgentLoading to launch target VM.\n",
			ReplyFailed, ReasonDynamicLoadingDisabled, 0},
		{"jdk25 dynamic loading disabled", "0\nDynamic agent loading is not enabled. Use -XX:+EnableDynamicAgentLoading to launch target VM.\n",
			ReplyJDK9, ReasonDynamicLoadingDisabled, 0},
		{"no answer", "0\n", ReplyJDK9, ReasonAgentLoadFailed, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseReply("load", []byte(tc.reply))
			if err != nil {
				t.Fatal(err)
			}
			if r.Format != tc.format {
				t.Errorf("format %s, want %s", r.Format, tc.format)
			}
			err = r.Err()
			if ReasonOf(err) != tc.wantReason {
				t.Fatalf("reason %q (%v), want %q", ReasonOf(err), err, tc.wantReason)
			}
			var ae *AttachError
			if err != nil && errors.As(err, &ae) && ae.ReturnCode != tc.wantRC {
				t.Errorf("return code %d, want %d", ae.ReturnCode, tc.wantRC)
			}
		})
	}
}

func TestParseReplyRejectsNonNumericStatus(t *testing.T) {
	for _, bad := range []string{"", "\n", "ok\n", "return code: 0\n", "0\nreturn code: x\n"} {
		if _, err := ParseReply("load", []byte(bad)); !errors.Is(err, ErrMalformedReply) {
			t.Errorf("ParseReply(%q) = %v, want ErrMalformedReply", bad, err)
		}
	}
}

func TestParseReplyKeepsOtherCommandsOutput(t *testing.T) {
	r, err := ParseReply("properties", []byte("0\njava.version=17\n"))
	if err != nil || r.Err() != nil || r.Message != "java.version=17\n" {
		t.Fatalf("got %+v, %v", r, err)
	}
}

func TestParseManifestJoinsContinuationLines(t *testing.T) {
	m := ParseManifest([]byte("Manifest-Version: 1.0\r\nAgent-Class: io.prometheus.jmx.Java\r\n Agent\r\nPremain-Class: x\r\n\r\nName: other\r\nAgent-Class: no\r\n"))
	if m["Agent-Class"] != "io.prometheus.jmx.JavaAgent" || m["Premain-Class"] != "x" {
		t.Fatalf("got %v", m)
	}
}

// valid16Config uses every top-level key jmx_exporter 1.6.0's collector and java agent read, with the kinds
// they accept, and an httpServer section with each setting of the 1.x agent's.
const valid16Config = `startDelaySeconds: 0
ssl: false
lowercaseOutputName: true
lowercaseOutputLabelNames: false
inferCounterTypeFromName: true
excludeJvmMetrics: true
includeObjectNames: ["java.lang:type=Memory", "dev.handlerkit.sample:*"]
excludeObjectNames: ["java.lang:type=Runtime"]
autoExcludeObjectNameAttributes: true
includeObjectNameAttributes:
  "java.lang:type=Memory": [HeapMemoryUsage]
excludeObjectNameAttributes:
  "java.lang:type=Runtime": [ClassPath, SystemProperties]
metricCustomizers:
  - mbeanFilter:
      domain: dev.handlerkit.sample
      properties:
        type: Counter
    attributesAsLabels: [Count]
    extraMetrics:
      - name: isActive
        value: true
        description: whether the counter is active
rules:
  - pattern: 'java.lang<type=Memory><HeapMemoryUsage>(\w+): (.*)'
    name: jvm_heap_$1_bytes
    value: $2
    valueFactor: 1
    type: GAUGE
    help: heap usage
    labels:
      area: heap
    attrNameSnakeCase: true
    cache: false
  - pattern: ".*"
httpServer:
  threads:
    minimum: 1
    maximum: 10
    keepAliveTime: 120
  authentication:
    basic:
      username: prometheus
      algorithm: SHA-256
      passwordHash: 2bf7ed4906ac065bde39f7508d6102a6cbb1f6b6e5d5a8d33c5f1a0c1a1cd5ff
      salt: U9i%=N+m]#i9yvUV:bA/3n4X9JdPXf=n
  ssl:
    keyStore:
      filename: /etc/jmx/keystore.p12
      type: PKCS12
      password: changeit
    certificate:
      alias: localhost
    trustStore:
      filename: /etc/jmx/truststore.p12
      password: changeit
    mutualTLS: false
  metrics:
    path: /metrics
openTelemetry:
  endpoint: http://localhost:4317
  protocol: grpc
  interval: 60
`

func TestValidateExporterConfig(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		ok   bool
	}{
		{"empty", "", true},
		{"null", "---\n", true},
		{"minimal", "rules:\n- pattern: \".*\"\n", true},
		{"full", "startDelaySeconds: 0\nlowercaseOutputName: true\nlowercaseOutputLabelNames: false\nincludeObjectNames: [\"java.lang:*\"]\nexcludeObjectNames: []\nrules:\n- pattern: x\n  name: y\n", true},
		{"syntax error", "rules: [\n", false},
		{"tab indentation", "rules:\n\t- pattern: x\n", false},
		{"top-level list", "- pattern: x\n", false},
		{"top-level scalar", "hello\n", false},
		{"unknown key", "rule:\n- pattern: x\n", false},
		{"duplicate key, last one valid", "rules: {}\nrules: []\n", true},
		{"duplicate key, last one invalid", "rules: []\nrules: {}\n", false},
		{"top-level merge key", "base: &b\n  x: 1\n<<: *b\nrules: []\n", false},
		{"top-level merge key of known keys", "rules: &r []\n<<: {lowercaseOutputName: true}\n", true},
		{"YAML 1.1 boolean", "lowercaseOutputName: yes\nexcludeJvmMetrics: Off\n", true},
		{"quoted yes", "lowercaseOutputName: \"yes\"\n", false},
		{"hex delay", "startDelaySeconds: 0x1e\n", true},
		{"sexagesimal delay", "startDelaySeconds: 1:30\n", true},
		{"delay beyond an Integer", "startDelaySeconds: 2147483648\n", false},
		{"ssl mapping", "ssl:\n  enabled: true\n  keyStore: {filename: /k.p12, password: x}\n", true},
		{"ssl list", "ssl: [true]\n", false},
		{"httpServer scalar", "httpServer: on\n", false},
		{"over the size limit", "rules: []\n#" + strings.Repeat("x", MaxConfigSize) + "\n", false},
		{"bool as string", "lowercaseOutputName: \"yes please\"\n", false},
		{"delay not int", "startDelaySeconds: soon\n", false},
		{"negative delay", "startDelaySeconds: -1\n", false},
		{"rules not list", "rules: {}\n", false},
		{"rule not mapping", "rules:\n- x\n", false},
		{"hostPort and jmxUrl", "hostPort: a:1\njmxUrl: service:jmx:x\n", false},
	}
	for _, tc := range cases {
		err := ValidateExporterConfig([]byte(tc.yaml))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if err := ValidateExporterConfig([]byte(valid16Config)); err != nil {
		t.Errorf("a valid jmx_exporter 1.6 config is refused: %v", err)
	}
	if err := ValidateExporterConfig([]byte("futureKey: 1\n"), "futureKey"); err != nil {
		t.Errorf("extra key refused: %v", err)
	}
}

func TestInjectResultRoundTrips(t *testing.T) {
	in := InjectResult{PID: 10, NSPID: 1, MainClass: "app.jar", Status: OutcomeError, Reason: ReasonPortInUse,
		Message: "port 9404 in use", Port: 9404, Host: "127.0.0.1", AgentPath: "/tmp/a.jar", ConfigPath: "/tmp/c.yaml"}
	line, err := in.MarshalLine()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsRune(line, '\n') {
		t.Fatalf("line has a newline: %s", line)
	}
	out, err := ParseInjectResult(append(line, '\n'))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("got %+v, want %+v", out, in)
	}
	for _, bad := range []string{
		"", "{}", `{"pid":1,"status":"maybe","port":1}`, `{"pid":1,"status":"error","port":1}`,
		`{"pid":1,"status":"ok","port":1,"extra":true}`, `{"pid":0,"status":"ok","port":1}`,
		`{"pid":1,"status":"ok","port":70000}`, `{"pid":1,"status":"ok","port":1} {}`, "not json",
	} {
		if _, err := ParseInjectResult([]byte(bad)); err == nil {
			t.Errorf("ParseInjectResult(%q): no error", bad)
		}
	}
}

func TestNewInjectorRejectsBadOptions(t *testing.T) {
	for _, o := range []Option{WithMinAge(-1), WithAttachTimeout(0), WithHTTPTimeout(-1), WithTargetDir("relative")} {
		if _, err := NewInjector(o); err == nil {
			t.Errorf("option accepted")
		}
	}
}
