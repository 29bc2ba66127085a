package jvm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

func TestParseArgfileFollowsTheLaunchersSyntax(t *testing.T) {
	cases := map[string][]string{
		"-Xmx64m  -XX:-EnableDynamicAgentLoading\n-cp app.jar": {"-Xmx64m", "-XX:-EnableDynamicAgentLoading", "-cp", "app.jar"},
		"# a comment -XX:+X\n-Da=1 # trailing\n":               {"-Da=1"},
		`"-Dmsg=hello world" '-Dq="x"'`:                        {"-Dmsg=hello world", `-Dq="x"`},
		`'-XX:-EnableDynamic''AgentLoading'`:                   {"-XX:-EnableDynamicAgentLoading"},
		"\"-Dlong=a\\\n      b\" -Dtab=\"x\\ty\"":              {"-Dlong=ab", "-Dtab=x\ty"},
		"-Dhash=a#b":       {"-Dhash=a#b"},
		"-Dbackslash=a\\b": {"-Dbackslash=a\\b"},
		"":                 nil,
		"\r\n\t ":          nil,
		"\"unterminated -XX:-EnableDynamicAgentLoading":                 {"unterminated -XX:-EnableDynamicAgentLoading"},
		"-XX:+DisableAttachMechanism\r\n-XX:-EnableDynamicAgentLoading": {"-XX:+DisableAttachMechanism", "-XX:-EnableDynamicAgentLoading"},
	}
	for in, want := range cases {
		if got := ParseArgfile([]byte(in)); !reflect.DeepEqual(got, want) {
			t.Errorf("ParseArgfile(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSplitOptionsKeepsQuotedSpaces(t *testing.T) {
	got := splitOptions(` -Xmx1g  "-Dname=a b" '-XX:-EnableDynamicAgentLoading'	-Dx=1 `)
	want := []string{"-Xmx1g", "-Dname=a b", "-XX:-EnableDynamicAgentLoading", "-Dx=1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestLauncherOptionsStopAtTheApplicationAndExpandArgfiles(t *testing.T) {
	files := map[string]string{
		"vm.args":     "-XX:-EnableDynamicAgentLoading\n-cp app.jar",
		"nested.args": "@vm.args",
		"main.args":   "-Xmx1g app.Main -XX:+DisableAttachMechanism",
	}
	read := func(name string) ([]byte, bool) {
		data, ok := files[name]
		return []byte(data), ok
	}
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"java", "@vm.args", "app.Main", "-XX:+DisableAttachMechanism"},
			[]string{"-XX:-EnableDynamicAgentLoading", "-cp", "app.jar"}},
		{[]string{"java", "-cp", "@vm.args", "Main"}, []string{"-cp", "-XX:-EnableDynamicAgentLoading", "-cp", "app.jar"}},
		{[]string{"java", "@main.args", "@vm.args"}, []string{"-Xmx1g"}},
		{[]string{"java", "@nested.args", "Main"}, []string{}},
		{[]string{"java", "--disable-@files", "@vm.args"}, []string{"--disable-@files"}},
		{[]string{"java", "@@vm.args"}, []string{}},
		{[]string{"java", "@missing.args", "-Xss1m", "-jar", "app.jar", "-XX:-EnableDynamicAgentLoading"}, []string{"-Xss1m"}},
		{[]string{"java", "-XX:-EnableDynamicAgentLoading", "-m", "mod/app.Main", "@vm.args"}, []string{"-XX:-EnableDynamicAgentLoading"}},
		{[]string{"java"}, []string{}},
		{nil, []string{}},
	}
	for _, tc := range cases {
		got := launcherOptions(tc.args, read)
		if len(got) == 0 && len(tc.want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("launcherOptions(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestDynamicAgentLoadingDisabledIsRefusedBeforeAnySignal starts JVMs with -XX:-EnableDynamicAgentLoading in
// each place the JVM reads options from: they refuse agents loaded at run time, so each must be refused with
// dynamic-loading-disabled, naming the flag, without a signal. A later +EnableDynamicAgentLoading wins.
func TestDynamicAgentLoadingDisabledIsRefusedBeforeAnySignal(t *testing.T) {
	t.Parallel()
	needJava(t)
	const off = "-XX:-EnableDynamicAgentLoading"
	argDir := t.TempDir()
	if err := os.Chmod(argDir, 0o755); err != nil {
		t.Fatal(err)
	}
	absArgfile := filepath.Join(argDir, "jvm.args")
	if err := os.WriteFile(absArgfile, []byte("# JVM options\n-Xmx64m\n"+off+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		opts    jvmtest.Options
		refused bool
	}{
		{"command line", jvmtest.Options{JVMArgs: []string{off}}, true},
		{"JAVA_TOOL_OPTIONS", jvmtest.Options{Env: []string{"JAVA_TOOL_OPTIONS=-Xss1m " + off}}, true},
		{"JDK_JAVA_OPTIONS", jvmtest.Options{Env: []string{"JDK_JAVA_OPTIONS=" + off}}, true},
		{"_JAVA_OPTIONS", jvmtest.Options{Env: []string{"_JAVA_OPTIONS=" + off}}, true},
		{"argfile relative to the working directory", jvmtest.Options{JVMArgs: []string{"@jvm.args"},
			Files: map[string][]byte{"jvm.args": []byte("'" + off + "'\n")}}, true},
		{"argfile in JDK_JAVA_OPTIONS", jvmtest.Options{Env: []string{"JDK_JAVA_OPTIONS=@" + absArgfile}}, true},
		{"enabled again on the command line", jvmtest.Options{JVMArgs: []string{"-XX:+EnableDynamicAgentLoading"},
			Env: []string{"JAVA_TOOL_OPTIONS=" + off}}, false},
	}
	for _, jdk := range testJDKs(t) {
		for _, tc := range cases {
			t.Run(jdk.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				opts := tc.opts
				opts.App, opts.Java = testApp, jdk.java
				jv := jvmtest.StartJVM(t, opts)
				port := freePort(t)
				res := newTestInjector(t, WithTargetDir(testTargetDir(t))).Inject(context.Background(), jv.Pid, loopbackAgent(port))
				if !tc.refused {
					requireOK(t, res)
					scrapeHeap(t, jv.Pid, port)
					return
				}
				if res.Reason != ReasonDynamicLoadingDisabled || !strings.Contains(res.Message, off) {
					t.Fatalf("inject: %+v, want %s naming %s", res, ReasonDynamicLoadingDisabled, off)
				}
				assertUntouched(t, jv)
			})
		}
	}
}

// TestDynamicLoadingDisabledWhereJmxAttachDoesNotLookMapsTheJVMsRefusal hides the flag in a -XX:Flags file: the
// JVM is signalled, refuses the load itself, and that refusal is reported with the same reason; the JVM lives
// and the copies are removed.
func TestDynamicLoadingDisabledWhereJmxAttachDoesNotLookMapsTheJVMsRefusal(t *testing.T) {
	t.Parallel()
	needJava(t)
	flagsDir := t.TempDir()
	if err := os.Chmod(flagsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	flags := filepath.Join(flagsDir, "flags")
	if err := os.WriteFile(flags, []byte("-EnableDynamicAgentLoading\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, jdk := range testJDKs(t) {
		t.Run(jdk.name, func(t *testing.T) {
			t.Parallel()
			jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp, Java: jdk.java, JVMArgs: []string{"-XX:Flags=" + flags}})
			parent := testTargetDir(t)
			res := newTestInjector(t, WithTargetDir(parent)).Inject(context.Background(), jv.Pid, loopbackAgent(freePort(t)))
			if res.Reason != ReasonDynamicLoadingDisabled || res.AgentPath != "" {
				t.Fatalf("inject: %+v, want %s without copies", res, ReasonDynamicLoadingDisabled)
			}
			if entries, _ := os.ReadDir(parent); len(entries) != 0 {
				t.Errorf("%s keeps %v after the JVM refused the agent", parent, entries)
			}
			if !jv.Alive() {
				t.Fatalf("JVM died: %s", jv.Output())
			}
		})
	}
}

// dynamicLoadWarning is the first line JDK 21 and later print to the application's stderr on each dynamic load.
const dynamicLoadWarning = "WARNING: A Java agent has been loaded dynamically"

// TestJDK21WarnsOnDynamicLoadUnlessEnabledExplicitly documents what the application's stderr gets: JDK 21+
// warns on every agent loaded at run time, unless the JVM runs with -XX:+EnableDynamicAgentLoading.
func TestJDK21WarnsOnDynamicLoadUnlessEnabledExplicitly(t *testing.T) {
	t.Parallel()
	needJava(t)
	java, version := newestJDK(t, 21)
	if java == "" {
		t.Skip("no JDK 21 or later under /usr/lib/jvm")
	}
	for _, explicit := range []bool{false, true} {
		t.Run(fmt.Sprintf("EnableDynamicAgentLoading=%v", explicit), func(t *testing.T) {
			t.Parallel()
			var args []string
			if explicit {
				args = []string{"-XX:+EnableDynamicAgentLoading"}
			}
			jv := jvmtest.StartJVM(t, jvmtest.Options{App: testApp, Java: java, JVMArgs: args})
			port := freePort(t)
			requireOK(t, newTestInjector(t, WithTargetDir(testTargetDir(t))).Inject(context.Background(), jv.Pid, loopbackAgent(port)))
			scrapeHeap(t, jv.Pid, port)
			if warned := strings.Contains(jv.Output(), dynamicLoadWarning); warned == explicit {
				t.Fatalf("JDK %s, explicit %v: warning printed = %v; output:\n%s", version, explicit, warned, jv.Output())
			}
		})
	}
}
