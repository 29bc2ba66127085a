package jvmtest_test

import (
	"testing"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// A test starts the sample application and reads its pid; the JVM is stopped when the test ends.
func ExampleStartJVM() {
	var t *testing.T // in a real test, the test's *testing.T
	app, err := jvmtest.BuildSampleApp(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	j := jvmtest.StartJVM(t, jvmtest.Options{App: app, JVMArgs: []string{"-Xmx64m"}})
	_ = j.Pid
}
