// Command agent builds the project's JMX exporter java agent (agent/, docs/agent.md) with Maven, or finds it in
// the cache, and prints the jar's path on its last line (`make agent`).
//
// The jar is cached as ${XDG_CACHE_HOME:-$HOME/.cache}/handlerkit/agent/<sha256 of agent/pom.xml and
// agent/src/>/handlerkit-jmx-agent.jar (jvmtest.AgentJar), so the tests, `make images` and this command share one
// build per change of the agent's sources.
//
// Usage: go run ./hack/agent
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	src, err := jvmtest.AgentSourceDir()
	if err == nil {
		var sum string
		if sum, err = jvmtest.AgentInputsSHA256(src); err == nil {
			fmt.Fprintf(os.Stderr, "agent: %s, inputs sha256 %s\n", src, sum)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
	jar, err := jvmtest.AgentJar(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
	fmt.Println(jar)
}
