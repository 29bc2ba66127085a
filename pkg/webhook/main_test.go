package webhook_test

import (
	"flag"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// cluster is one control plane for the package's tests, each in namespaces
// of its own and with a webhook configuration that sees only its own
// namespaces.
var cluster testenv.Shared

func TestMain(m *testing.M) {
	// client-go's informers log through klog; the tests log what matters.
	flags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(flags)
	for name, value := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := flags.Set(name, value); err != nil {
			fmt.Fprintln(os.Stderr, "klog:", err)
			os.Exit(1)
		}
	}
	klog.SetOutput(io.Discard)
	klog.SetLogger(logr.Discard())
	os.Exit(cluster.Main(m))
}
