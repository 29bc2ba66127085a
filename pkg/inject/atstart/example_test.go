package atstart_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
)

func ExampleMutate() {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name:  "app",
		Image: "app:test",
		Env:   []corev1.EnvVar{{Name: "JAVA_TOOL_OPTIONS", Value: "-Xss1m"}},
	}}}}
	res, err := atstart.Mutate(pod, atstart.Input{
		Exporter: "demo",
		Port:     9404,
		Config:   []byte("rules:\n- pattern: \".*\"\n"),
		Image:    "handlerkit/jmx-agent:test",
	})
	if err != nil {
		fmt.Println(err) // the Input is unusable: admit the pod unchanged
		return
	}
	for _, op := range res.Patch {
		fmt.Println(op.Op, op.Path)
	}
	fmt.Println(res.Patch[3].Value)
	fmt.Println(res.Injected, res.Notes)
	// Output:
	// add /metadata/annotations
	// add /spec/volumes
	// add /spec/containers/0/volumeMounts
	// add /spec/containers/0/env/0/value
	// add /spec/containers/0/env/-
	// -Xss1m -javaagent:/handlerkit/jmx-agent/opt/handlerkit/jmx-agent.jar=9404:env:HANDLERKIT_JMX_CONFIG
	// [{app 9404}] []
}
