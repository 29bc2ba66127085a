package jvm_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"time"

	"github.com/handlerkit/handlerkit/pkg/jvm"
)

func ExampleDiscover() {
	jvms, err := jvm.Discover()
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range jvms {
		fmt.Printf("%d (nspid %d) %s, Java %s, up %s\n", j.PID, j.NSPID, j.MainClass, j.JavaVersion, j.Age.Truncate(time.Second))
	}
}

func ExampleInjector_Inject() {
	in, err := jvm.NewInjector(jvm.WithMinAge(30 * time.Second))
	if err != nil {
		log.Fatal(err)
	}
	res := in.Inject(context.Background(), 4242, jvm.Agent{
		Jar:    "/opt/jmx/jmx_prometheus_javaagent.jar",
		Config: "/opt/jmx/config.yaml",
		Port:   9404,
	})
	line, _ := res.MarshalLine()
	fmt.Printf("%s\n", line) // the operator reads this back with jvm.ParseInjectResult
}

func ExampleParseInjectResult() {
	r, err := jvm.ParseInjectResult([]byte(`{"pid":4242,"nspid":1,"status":"error","reason":"port-in-use","message":"port 9404 is already in use","port":9404}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.OK(), r.Reason, r.NSPID)
	// Output: false port-in-use 1
}

// The operator streams the agent and config to `jmx-attach inject --bundle-stdin` through pods/exec.
func ExampleWriteBundle() {
	var stdin bytes.Buffer
	if err := jvm.WriteBundle(&stdin, []byte("PK\x03\x04..."), []byte("rules:\n- pattern: \".*\"\n")); err != nil {
		log.Fatal(err)
	}
	b, err := jvm.ReadBundle(&stdin, true) // what jmx-attach does with its stdin
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d-byte jar, %q\n", len(b.AgentJar), b.Config)
	// Output: 7-byte jar, "rules:\n- pattern: \".*\"\n"
}

// The rule of `jmx-attach inject --all --jvm PATTERN`.
func ExampleMatchJVM() {
	patterns, err := jvm.ParseJVMPatterns("app.jar,com.example.*")
	if err != nil {
		log.Fatal(err)
	}
	for _, main := range []string{"/opt/app/app.jar", "com.example.Main", "mymod/com.example.Main", "org.other.Main"} {
		p, ok := jvm.MatchJVM(jvm.JVM{MainClass: main}, patterns)
		fmt.Println(main, ok, p)
	}
	// Output:
	// /opt/app/app.jar true app.jar
	// com.example.Main true com.example.*
	// mymod/com.example.Main true com.example.*
	// org.other.Main false
}

// An ephemeral container's results, read back from the pod's status.
func ExampleParseTerminationLog() {
	log1 := jvm.FormatTerminationLog([]jvm.InjectResult{
		{PID: 42, NSPID: 1, Status: jvm.OutcomeOK, Port: 9404, AgentPath: "/tmp/handlerkit-jmx-0123456789abcdef/agent.jar"},
		{PID: 43, NSPID: 7, Status: jvm.OutcomeError, Reason: jvm.ReasonPortInUse, Port: 9405},
	})
	results, err := jvm.ParseTerminationLog(log1)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range results {
		fmt.Println(r.PID, r.Status, r.Reason, r.AgentPath == "")
	}
	// Output:
	// 42 ok  true
	// 43 error port-in-use true
}

// The operator puts the config into an ephemeral container's environment in the compact form, and jmx-attach
// --config-env reads it back.
func ExampleEncodeConfigEnv() {
	value, err := jvm.EncodeConfigEnv([]byte("lowercaseOutputName: true\nrules:\n- pattern: \".*\"\n"))
	if err != nil {
		log.Fatal(err)
	}
	config, err := jvm.DecodeConfigEnv(value)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(value) > len(jvm.ConfigEnvGzipPrefix), string(config) == "lowercaseOutputName: true\nrules:\n- pattern: \".*\"\n")
	// Output: true true
}
