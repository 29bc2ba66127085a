package jvm_test

import (
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
