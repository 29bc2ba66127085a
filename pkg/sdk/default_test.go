package sdk_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

func TestPackageFunctionsReturnErrorsWithoutAConfig(t *testing.T) {
	sdk.SetDefault(nil)
	t.Cleanup(func() { sdk.SetDefault(nil) })
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("HOME", t.TempDir())

	if err := sdk.Watch("v1", "ConfigMap", "", 0); err == nil || !strings.Contains(err.Error(), "kubeconfig") {
		t.Errorf("Watch = %v, want an error about the missing configuration", err)
	}
	sdk.Handle(sdk.HandlerFunc(func(context.Context, sdk.Event) error { return nil }))
	if err := sdk.Run(context.Background()); err == nil {
		t.Error("Run without a configuration succeeded")
	}
}

func TestDefaultOperatorIsBuiltFromKUBECONFIG(t *testing.T) {
	env := sdk.SharedEnv(t)
	sdk.SetDefault(nil)
	t.Cleanup(func() { sdk.SetDefault(nil) })
	cfg := env.Config()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", path)

	op, err := sdk.Default()
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := sdk.Default(); again != op {
		t.Error("Default built a second Operator")
	}
	if op.RESTConfig().Host != cfg.Host {
		t.Errorf("default Operator talks to %q, want %q from $KUBECONFIG", op.RESTConfig().Host, cfg.Host)
	}
	// The credentials from the file work.
	if _, err := op.Clientset().CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestPackageFunctionsRunTheDefaultOperator(t *testing.T) {
	// The default Operator would serve metrics on :8383 (all interfaces);
	// tests stay on loopback, so the default is replaced by one that
	// does not serve.
	f := newFixture(t)
	sdk.SetDefault(f.op)
	t.Cleanup(func() { sdk.SetDefault(nil) })
	rec := &recorder{}
	if err := sdk.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	sdk.Handle(rec)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sdk.Run(ctx) }()
	f.createCM(t, "through-default")
	eventually(t, 10*time.Second, "handled through the package-level functions", func() bool {
		return len(rec.find("through-default", nil)) == 1
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
